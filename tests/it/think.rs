//! Thinking ticks end to end (docs/autonomy.md, "Thinking ticks"): pmm-tick with a model
//! adapter asks the model when its decision acts, applies the reply's markers by the turn's
//! rules, calls at most once per slot, within a daily budget, and leaves a failed call as a
//! generation_failure naming the slot.

use crate::harness::{Pmm, Run};
use crate::stub::{self, Stub, StubResponse};
use serde_json::Value;

/// Runs `name args…` with extra environment variables.
fn run_env(pmm: &Pmm, name: &str, args: &[&str], envs: &[(&str, &str)]) -> Run {
    let mut c = pmm.std_cmd(name);
    c.args(args).stdin(std::process::Stdio::null());
    for (k, v) in envs {
        c.env(k, v);
    }
    let out = c.output().expect("run");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn write_script(pmm: &Pmm, name: &str, replies: &[&str]) -> String {
    let path = pmm.path(name);
    let text: String = replies
        .iter()
        .map(|r| format!("{}\n", Value::String(r.to_string())))
        .collect();
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// A scripted turn (its reply is line N of `turns.jsonl` for the ledger's Nth turn).
fn turn(pmm: &Pmm, msg: &str, envs: &[(&str, &str)]) {
    let script = pmm.path("turns.jsonl").to_string_lossy().into_owned();
    let r = run_env(
        pmm,
        "pmm-turn",
        &["--adapter", "scripted", "--script", &script, msg],
        envs,
    );
    assert_eq!(r.code, 0, "{r:?}");
}

fn of_kind(r: &Run, kind: &str) -> Vec<Value> {
    r.records()
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

fn all_events(pmm: &Pmm) -> Vec<Value> {
    let r = pmm.run("pmm-replay", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
}

fn verify_deep(pmm: &Pmm) {
    let r = pmm.run("pmm-verify", &["--deep", "--quiet"], "");
    assert_eq!(r.code, 0, "the ledger must verify deeply: {r:?}");
}

fn tick_record(r: &Run) -> Value {
    r.of_type("tick").pop().expect("a tick record")
}

#[test]
fn ticks_without_an_adapter_make_no_request_at_all() {
    let pmm = Pmm::new();
    write_script(&pmm, "turns.jsonl", &["Noted.", "Okay."]);
    let stub = Stub::start(vec![StubResponse::Ollama("COMMIT: never".into())]);
    let host = stub.url();
    let env = [
        ("OLLAMA_HOST", host.as_str()),
        ("OPENAI_BASE_URL", host.as_str()),
    ];
    turn(&pmm, "hello", &[]);
    for slot in ["1", "2", "3"] {
        let r = run_env(&pmm, "pmm-tick", &["--slot", slot], &env);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(tick_record(&r).get("think").is_none(), "{r:?}");
    }
    assert!(stub.requests().is_empty(), "{:?}", stub.requests());
    assert!(stub.preflights().is_empty(), "{:?}", stub.preflights());
}

#[test]
fn a_thinking_tick_opens_what_the_model_commits_to_and_closes_what_it_closes() {
    let pmm = Pmm::new();
    write_script(&pmm, "turns.jsonl", &["Noted.", "Okay."]);
    turn(&pmm, "I have an idea about gardens", &[]);

    // Ollama: the reply opens a commitment, source autonomy_kernel.
    let ollama = Stub::start(vec![StubResponse::Ollama(
        "Worth a look.\nCOMMIT: explore the garden idea".into(),
    )]);
    let host = ollama.url();
    let r = run_env(
        &pmm,
        "pmm-tick",
        &["--slot", "1", "--adapter", "ollama"],
        &[("OLLAMA_HOST", host.as_str())],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ollama.requests().len(), 1);
    let t = tick_record(&r);
    assert_eq!(t["decision"], "reflect", "{t}");
    assert_eq!(t["think"]["asked"], true, "{t}");
    let [reply] = &of_kind(&r, "assistant_message")[..] else {
        panic!("one reply: {r:?}")
    };
    let m = &reply["meta"];
    assert_eq!(m["source"], "autonomy_kernel", "{m}");
    assert_eq!(m["provider"], "ollama", "{m}");
    assert_eq!(m["model"], stub::OLLAMA_MODEL, "{m}");
    assert_eq!(m["in_tokens"], stub::OLLAMA_TOKENS.0, "{m}");
    assert_eq!(m["out_tokens"], stub::OLLAMA_TOKENS.1, "{m}");
    assert_eq!(m["prompt_sha256"].as_str().map(str::len), Some(64), "{m}");
    assert_eq!(m["slot"], 1, "{m}");
    let [open] = &of_kind(&r, "commitment_open")[..] else {
        panic!("one commitment opened: {r:?}")
    };
    assert_eq!(open["meta"]["source"], "autonomy_kernel", "{open}");
    assert_eq!(open["meta"]["text"], "explore the garden idea", "{open}");
    let cid = open["meta"]["cid"].as_str().unwrap().to_string();
    // The prompt held the agent's commitments and what the reply may do.
    let body = &ollama.requests()[0].body;
    let sent = body["messages"].to_string();
    assert!(sent.contains("autonomy tick, slot 1"), "{sent}");
    assert!(sent.contains("COMMIT: <text>"), "{sent}");
    // The kernel's own reflection still follows, and the outcome is a success.
    let kernel = of_kind(&r, "reflection")
        .into_iter()
        .filter(|e| e["meta"]["source"] == "autonomy_kernel")
        .count();
    assert_eq!(kernel, 1, "{r:?}");
    let [outcome] = &of_kind(&r, "outcome_observation")[..] else {
        panic!("{r:?}")
    };
    assert!(outcome["content"].as_str().unwrap().contains("success"));

    // A turn, then OpenAI: the reply closes it.
    turn(&pmm, "how is it going?", &[]);
    let openai = Stub::start(vec![StubResponse::OpenAi(format!("Done.\nCLOSE: {cid}"))]);
    let base = format!("{}/v1", openai.url());
    let r = run_env(
        &pmm,
        "pmm-tick",
        &["--slot", "2", "--adapter", "openai", "--model", "m"],
        &[("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "k")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(openai.requests().len(), 1);
    let sent = openai.requests()[0].body["messages"].to_string();
    assert!(
        sent.contains(&cid),
        "the prompt lists the open commitment: {sent}"
    );
    let [close] = &of_kind(&r, "commitment_close")[..] else {
        panic!("one close: {r:?}")
    };
    assert_eq!(close["meta"]["cid"], cid.as_str(), "{close}");
    assert_eq!(close["meta"]["source"], "autonomy_kernel", "{close}");
    let reply = &of_kind(&r, "assistant_message")[0];
    assert_eq!(reply["meta"]["in_tokens"], stub::OPENAI_TOKENS.0);
    verify_deep(&pmm);
    // The deep check rebuilds the thinking replies' prompts too.
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    let deep = &r.summary()["deep"];
    assert_eq!(deep["prompts"]["thinking"], 2, "{deep}");
    assert_eq!(deep["prompts"]["other_format"], 0, "{deep}");
    assert_eq!(deep["prompts"]["mismatches"], 0, "{deep}");
}

#[test]
fn two_ticks_racing_on_each_slot_make_at_most_one_model_call() {
    let pmm = Pmm::new();
    let replies: Vec<String> = (0..42).map(|i| format!("Reply {i}.")).collect();
    let replies: Vec<&str> = replies.iter().map(String::as_str).collect();
    write_script(&pmm, "turns.jsonl", &replies);
    let stub = Stub::start(vec![StubResponse::Ollama("Nothing to do.".into())]);
    let host = stub.url();
    let slots = 40;
    for slot in 1..=slots {
        // A turn before each slot: each slot's decision is a reflection (rule 2).
        turn(&pmm, &format!("message {slot}"), &[]);
        let s = slot.to_string();
        let spawn = || {
            let mut c = pmm.std_cmd("pmm-tick");
            c.args(["--slot", &s, "--adapter", "ollama"])
                .env("OLLAMA_HOST", &host)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().expect("spawn pmm-tick")
        };
        let (a, b) = (spawn(), spawn());
        for child in [a, b] {
            let out = child.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(
            stub.requests().len(),
            slot as usize,
            "one model call per acting slot (slot {slot})"
        );
    }
    let events = all_events(&pmm);
    let count = |kind: &str| events.iter().filter(|e| e["kind"] == kind).count();
    assert_eq!(count("autonomy_stimulus"), slots as usize);
    assert_eq!(count("autonomy_tick"), slots as usize);
    verify_deep(&pmm);
}

#[test]
fn the_budget_stops_thinking_for_the_day_and_it_resumes_the_next() {
    let pmm = Pmm::new();
    write_script(&pmm, "turns.jsonl", &["One.", "Two.", "Three."]);
    let stub = Stub::start(vec![StubResponse::Ollama("Fine.".into())]);
    let host = stub.url();
    let day1 = [
        ("OLLAMA_HOST", host.as_str()),
        ("PMM_NOW", "2025-11-24T10:00:00Z"),
    ];
    let day2 = [
        ("OLLAMA_HOST", host.as_str()),
        ("PMM_NOW", "2025-11-25T00:00:01Z"),
    ];
    let r = run_env(&pmm, "pmm-tick", &["--set", "think_calls_per_day=1"], &day1);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.of_type("thresholds")[0]["think_calls_per_day"],
        1,
        "{r:?}"
    );
    let think = |slot: &str, env: &[(&str, &str)]| {
        let r = run_env(
            &pmm,
            "pmm-tick",
            &["--slot", slot, "--adapter", "ollama"],
            env,
        );
        assert_eq!(r.code, 0, "{r:?}");
        r
    };
    turn(&pmm, "first", &day1);
    let r = think("1", &day1);
    assert_eq!(tick_record(&r)["think"]["asked"], true, "{r:?}");
    assert_eq!(stub.requests().len(), 1);

    turn(&pmm, "second", &day1);
    let r = think("2", &day1);
    let t = tick_record(&r);
    assert_eq!(t["think"]["asked"], false, "{t}");
    assert_eq!(
        t["decision"], "reflect",
        "today's deterministic action: {t}"
    );
    let tick = &of_kind(&r, "autonomy_tick")[0];
    let why = tick["meta"]["think"].as_str().unwrap_or_default();
    assert!(why.contains("think_calls_per_day 1"), "{tick}");
    assert_eq!(
        stub.requests().len(),
        1,
        "no call once the day's budget is spent"
    );

    turn(&pmm, "third", &day2);
    let r = think("3", &day2);
    assert_eq!(tick_record(&r)["think"]["asked"], true, "{r:?}");
    assert_eq!(stub.requests().len(), 2, "the next UTC day thinks again");
    verify_deep(&pmm);
}

#[test]
fn a_failing_model_leaves_a_generation_failure_naming_the_slot_and_exit_3() {
    for (what, answer, timeout) in [
        (
            "a 500",
            StubResponse::Status(500, r#"{"error":"boom"}"#.into()),
            "30",
        ),
        ("a dropped connection", StubResponse::Close, "30"),
        ("a stall past --timeout", StubResponse::Hang, "1"),
    ] {
        let pmm = Pmm::new();
        write_script(&pmm, "turns.jsonl", &["Noted."]);
        turn(&pmm, "hello", &[]);
        let before = all_events(&pmm).len();
        let stub = Stub::start(vec![answer]);
        let host = stub.url();
        let r = run_env(
            &pmm,
            "pmm-tick",
            &[
                "--slot",
                "7",
                "--adapter",
                "ollama",
                "--retries",
                "0",
                "--timeout",
                timeout,
            ],
            &[("OLLAMA_HOST", host.as_str())],
        );
        assert_eq!(r.code, 3, "{what}: {r:?}");
        let events = all_events(&pmm);
        let new: Vec<&str> = events[before..]
            .iter()
            .map(|e| e["kind"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            new,
            ["autonomy_stimulus", "generation_failure"],
            "{what}: the claim and the failure, nothing else"
        );
        let failure = events.last().unwrap();
        assert_eq!(failure["meta"]["slot"], 7, "{what}: {failure}");
        assert_eq!(failure["meta"]["source"], "autonomy_kernel", "{what}");
        verify_deep(&pmm);
        // The slot is spent: ticking it again writes nothing and asks nothing.
        let calls = stub.requests().len();
        let r = run_env(
            &pmm,
            "pmm-tick",
            &["--slot", "7", "--adapter", "ollama"],
            &[("OLLAMA_HOST", host.as_str())],
        );
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(tick_record(&r)["decision"], Value::Null);
        assert_eq!(stub.requests().len(), calls, "{what}");
    }
}

#[test]
fn two_copies_given_the_same_slots_and_replies_stay_hash_identical() {
    let run = || {
        let pmm = Pmm::new();
        write_script(&pmm, "turns.jsonl", &["Noted.", "Sure."]);
        let think = write_script(
            &pmm,
            "think.jsonl",
            &[
                "Let me plan.\nCOMMIT: sketch the plan\nREFLECT:{\"note\":\"planning\"}",
                "CLAIM:preference={\"domain\":\"mode\",\"value\":\"calm\"}",
            ],
        );
        turn(&pmm, "we should plan", &[]);
        for slot in 1..=3 {
            if slot == 3 {
                turn(&pmm, "and now?", &[]);
            }
            let r = run_env(
                &pmm,
                "pmm-tick",
                &[
                    "--slot",
                    &slot.to_string(),
                    "--adapter",
                    "scripted",
                    "--script",
                    &think,
                ],
                &[],
            );
            assert_eq!(r.code, 0, "{r:?}");
        }
        verify_deep(&pmm);
        let events = all_events(&pmm);
        // Each thinking reply's prompt is rebuilt from the ledger and matches its digest.
        let thinking: Vec<i64> = events
            .iter()
            .filter(|e| {
                e["kind"] == "assistant_message" && e["meta"]["source"] == "autonomy_kernel"
            })
            .map(|e| e["id"].as_i64().unwrap())
            .collect();
        assert_eq!(thinking.len(), 2, "two thinking replies");
        for id in thinking {
            let r = pmm.run("pmm-replay", &["--prompt", &id.to_string()], "");
            assert_eq!(r.code, 0, "{r:?}");
            let rec = r.of_type("prompt").pop().expect("a prompt record");
            assert_eq!(rec["matches"], true, "{rec}");
            assert!(
                rec["user"]
                    .as_str()
                    .unwrap()
                    .contains("[autonomy tick, slot"),
                "{rec}"
            );
        }
        (pmm, events)
    };
    let (_a, one) = run();
    let (_b, two) = run();
    assert!(one
        .iter()
        .any(|e| e["kind"] == "commitment_open" && e["meta"]["source"] == "autonomy_kernel"));
    assert_eq!(one.len(), two.len());
    assert_eq!(one.last().unwrap()["hash"], two.last().unwrap()["hash"]);
    assert_eq!(one, two);
}

#[test]
fn a_bad_adapter_setup_is_refused_before_the_ledger_is_created() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm-tick", &["--adapter", "scripted"], "");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--script"), "{r:?}");
    assert!(!pmm.db.exists(), "no ledger is created for a bad setup");
}

/// Ticks slots `from..=to` with the Ollama stub at `host`: every event written, in order.
fn think_slots(pmm: &Pmm, host: &str, slots: std::ops::RangeInclusive<i64>) -> Vec<Value> {
    let mut events = Vec::new();
    for slot in slots {
        let s = slot.to_string();
        let r = run_env(
            pmm,
            "pmm-tick",
            &["--slot", &s, "--adapter", "ollama"],
            &[("OLLAMA_HOST", host)],
        );
        assert_eq!(r.code, 0, "{r:?}");
        events.extend(r.records().into_iter().filter(|e| e.get("kind").is_some()));
    }
    events
}

/// The kernel's goals that stay open, among `events`.
fn goals_opened(events: &[Value]) -> Vec<Value> {
    let caused = |e: &&Value| e["kind"] == "commitment_open" && e["meta"]["cause"].is_string();
    events.iter().filter(caused).cloned().collect()
}

#[test]
fn an_idle_agent_opens_a_goal_that_a_later_thinking_tick_works_and_closes() {
    let pmm = Pmm::new();
    write_script(&pmm, "turns.jsonl", &["Noted."]);
    turn(&pmm, "hello", &[]);
    let stub = Stub::start(vec![StubResponse::Ollama(
        "Explored: a garden of ideas.\nNothing else.".into(),
    )]);
    let host = stub.url();
    // Idle ticks until the goal is opened: nothing open, 20 events since the turn.
    let mut events = Vec::new();
    let mut slot = 0;
    while goals_opened(&events).is_empty() {
        slot += 1;
        assert!(slot <= 12, "no goal opened: {events:?}");
        events.extend(think_slots(&pmm, &host, slot..=slot));
    }
    let [goal] = &goals_opened(&events)[..] else {
        panic!("one goal: {events:?}")
    };
    let turn_id = all_events(&pmm)
        .iter()
        .filter(|e| e["kind"] == "metrics_turn")
        .map(|e| e["id"].as_i64().unwrap())
        .max()
        .unwrap();
    let m = &goal["meta"];
    assert_eq!(m["goal"], "explore_new_idea", "{goal}");
    assert_eq!(m["cause"], format!("idle_since:{turn_id}"), "{goal}");
    assert_eq!(m["origin"], "autonomy_kernel", "{goal}");
    let cid = m["cid"].as_str().unwrap().to_string();
    // It stays open: --state shows it.
    let state = pmm.run("pmm-replay", &["--state"], "").records()[0].clone();
    let open = &state["autonomy"]["internal_goals"]["open"];
    assert_eq!(open[0]["cid"], cid.as_str(), "{state}");
    assert_eq!(open[0]["goal"], "explore_new_idea", "{state}");

    // The next thinking tick works it: the prompt names it, the reply's first line closes it.
    let asked = stub.requests().len();
    let next = think_slots(&pmm, &host, slot + 1..=slot + 1);
    assert_eq!(
        stub.requests().len(),
        asked + 1,
        "the goal is worked by a call"
    );
    let sent = stub.requests()[asked].body["messages"].to_string();
    assert!(
        sent.contains(&format!("Your goal for this tick: {cid} explore_new_idea")),
        "{sent}"
    );
    assert!(
        sent.contains(&format!(
            "Internal goals: 0 worked; open: {cid} explore_new_idea (idle_since:{turn_id})"
        )),
        "{sent}"
    );
    let closes: Vec<&Value> = next
        .iter()
        .filter(|e| e["kind"] == "commitment_close" && e["meta"]["cid"] == cid.as_str())
        .collect();
    let [close] = &closes[..] else {
        panic!("the goal is closed once: {next:?}")
    };
    assert_eq!(
        close["meta"]["outcome"], "Explored: a garden of ideas.",
        "{close}"
    );
    let reply = next
        .iter()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap();
    assert_eq!(close["meta"]["reply"], reply["id"], "{close}");

    // Never twice for one cause: more idle ticks open no other goal.
    let later = think_slots(&pmm, &host, slot + 2..=slot + 8);
    assert!(goals_opened(&later).is_empty(), "{later:?}");
    let state = pmm.run("pmm-replay", &["--state"], "").records()[0].clone();
    let goals = &state["autonomy"]["internal_goals"];
    assert_eq!(goals["open"], serde_json::json!([]), "{state}");
    assert_eq!(goals["newest"]["cid"], cid.as_str(), "{state}");
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.summary()["deep"]["open_goals"], 1, "{r:?}");
}

#[test]
fn a_stalled_commitment_opens_one_review_goal() {
    let pmm = Pmm::new();
    write_script(&pmm, "turns.jsonl", &["Will do.\nCOMMIT: write the report"]);
    turn(&pmm, "Please write the report", &[]);
    let stub = Stub::start(vec![StubResponse::Ollama("Still on it.".into())]);
    let host = stub.url();
    let events = think_slots(&pmm, &host, 1..=12);
    let goals = goals_opened(&events);
    let [goal] = &goals[..] else {
        panic!("one review goal: {goals:?}")
    };
    let cid = all_events(&pmm)
        .iter()
        .find(|e| e["kind"] == "commitment_open")
        .map(|e| e["meta"]["cid"].as_str().unwrap().to_string())
        .unwrap();
    assert_eq!(goal["meta"]["goal"], "review_stalled_commitment", "{goal}");
    assert_eq!(goal["meta"]["cause"], format!("stalled:{cid}"), "{goal}");
    let gid = goal["meta"]["cid"].as_str().unwrap();
    let worked = events.iter().any(|e| {
        e["kind"] == "commitment_close"
            && e["meta"]["cid"] == gid
            && e["meta"]["outcome"] == "Still on it."
    });
    assert!(worked, "worked and closed: {events:?}");
    verify_deep(&pmm);
}

#[test]
fn ticks_without_a_model_open_no_goal_that_stays_open() {
    let pmm = Pmm::new();
    write_script(&pmm, "turns.jsonl", &["Will do.\nCOMMIT: write the report"]);
    turn(&pmm, "Please write the report", &[]);
    for slot in 1..=12 {
        let r = pmm.run("pmm-tick", &["--slot", &slot.to_string()], "");
        assert_eq!(r.code, 0, "{r:?}");
    }
    assert!(goals_opened(&all_events(&pmm)).is_empty());
}

#[test]
fn ticks_of_two_slots_at_the_budgets_edge_make_one_call_between_them() {
    let pmm = Pmm::new();
    write_script(&pmm, "turns.jsonl", &["One."]);
    let stub = Stub::start(vec![StubResponse::SlowOllama(1500, "Fine.".into())]);
    let host = stub.url();
    let r = pmm.run("pmm-tick", &["--set", "think_calls_per_day=1"], "");
    assert_eq!(r.code, 0, "{r:?}");
    turn(&pmm, "first", &[]);
    let spawn = |slot: &str| {
        let mut c = pmm.std_cmd("pmm-tick");
        c.args(["--slot", slot, "--adapter", "ollama"])
            .env("OLLAMA_HOST", &host)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c.spawn().expect("spawn pmm-tick")
    };
    // Slot 1's call is in flight (its claim written, no reply yet) when slot 2 decides.
    let a = spawn("1");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let b = spawn("2");
    let mut thought = Vec::new();
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(0), "{text}");
        thought.push(text);
    }
    assert_eq!(
        stub.requests().len(),
        1,
        "one call for the day: {thought:?}"
    );
    assert!(thought[1].contains("think budget spent"), "{thought:?}");
    verify_deep(&pmm);
}

/// Issue 44, N8: token counts near 2^63, on the ledger or from a model server, never panic:
/// the day's sum saturates (the budget is spent) and every program keeps working.
#[test]
fn token_counts_near_two_to_the_63_never_panic() {
    let pmm = Pmm::new();
    assert_eq!(
        pmm.run("pmm-turn", &["--adapter", "dummy", "hi"], "").code,
        0
    );
    let meta = r#"{"source":"autonomy_kernel","slot_id":"x1","in_tokens":9223372036854775807,"out_tokens":0}"#;
    for content in ["a", "b"] {
        let r = pmm.run(
            "pmm-append",
            &[
                "--kind",
                "assistant_message",
                "--content",
                content,
                "--meta",
                meta,
            ],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
    let r = pmm.run("pmm-replay", &["--state"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let r = pmm.run("pmm-tick", &["--slot", "9"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let r = pmm.run("pmm-turn", &["--adapter", "dummy", "hi again"], "");
    assert_eq!(r.code, 0, "{r:?}");

    // From a model server, on a ledger whose next tick reflects (a turn, a tick, a turn).
    let pmm = Pmm::new();
    write_script(&pmm, "turns.jsonl", &["One.", "Two."]);
    turn(&pmm, "first", &[]);
    assert_eq!(pmm.run("pmm-tick", &["--slot", "1"], "").code, 0);
    turn(&pmm, "second", &[]);
    let body = r#"{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":1}}"#;
    let stub = Stub::start(vec![StubResponse::Status(200, body.into())]);
    let base = format!("{}/v1", stub.url());
    let r = run_env(
        &pmm,
        "pmm-tick",
        &["--slot", "2", "--adapter", "openai", "--model", "m"],
        &[("OPENAI_BASE_URL", base.as_str())],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(tick_record(&r)["think"]["asked"], true, "{r:?}");
    let r = pmm.run("pmm-replay", &["--state"], "");
    assert_eq!(r.code, 0, "{r:?}");
    verify_deep(&pmm);
}

/// Issue 44: a server that reports 0 tokens (or none) is charged the reply's and prompt's
/// size, so its thinking still spends the day's token budget.
#[test]
fn a_server_that_reports_no_tokens_still_spends_the_budget() {
    let pmm = Pmm::new();
    write_script(&pmm, "turns.jsonl", &["One.", "Two.", "Three."]);
    turn(&pmm, "I have an idea about gardens", &[]);
    let body = r#"{"choices":[{"message":{"content":"A long enough reply about the garden idea and what to plant first."}}],"usage":{"prompt_tokens":0,"completion_tokens":0}}"#;
    let stub = Stub::start(vec![StubResponse::Status(200, body.into())]);
    let base = format!("{}/v1", stub.url());
    let think = |slot: &str| {
        let r = run_env(
            &pmm,
            "pmm-tick",
            &["--slot", slot, "--adapter", "openai", "--model", "m"],
            &[("OPENAI_BASE_URL", base.as_str())],
        );
        assert_eq!(r.code, 0, "{r:?}");
        r
    };
    let r = think("1");
    let reply = &of_kind(&r, "assistant_message")[0];
    let m = &reply["meta"];
    // What the server said is kept; the budget is charged the texts' size.
    assert_eq!(m["in_tokens"], 0, "{m}");
    assert_eq!(m["out_tokens"], 0, "{m}");
    assert!(m["tokens_charged"].as_u64().unwrap() > 60, "{m}");
    let r = run_env(&pmm, "pmm-tick", &["--set", "think_tokens_per_day=50"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    turn(&pmm, "and then?", &[]);
    let r = think("2");
    let t = tick_record(&r);
    assert_eq!(
        t["think"]["asked"], false,
        "the day's 50 tokens are spent: {t}"
    );
    let tick = &of_kind(&r, "autonomy_tick")[0];
    let why = tick["meta"]["think"].as_str().unwrap_or_default();
    assert!(why.contains("think_tokens_per_day 50"), "{tick}");
    assert_eq!(stub.requests().len(), 1);
    verify_deep(&pmm);
}

/// Issue 44: a thinking tick says how many markers past the limit it did not act on, as a
/// turn does.
#[test]
fn a_thinking_tick_says_which_markers_it_ignored() {
    let pmm = Pmm::new();
    write_script(&pmm, "turns.jsonl", &["One."]);
    turn(&pmm, "I have an idea about gardens", &[]);
    let reply: String = (0..70)
        .map(|i| format!("COMMIT: plant row {i}\n"))
        .collect();
    let stub = Stub::start(vec![StubResponse::Ollama(reply)]);
    let host = stub.url();
    let r = run_env(
        &pmm,
        "pmm-tick",
        &["--slot", "1", "--adapter", "ollama"],
        &[("OLLAMA_HOST", host.as_str())],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let t = tick_record(&r);
    assert_eq!(t["think"]["markers_ignored"]["commits"], 6, "{t}");
    let opened = of_kind(&r, "commitment_open")
        .into_iter()
        .filter(|e| e["meta"]["origin"] == "assistant")
        .count();
    assert_eq!(opened, 64);
}
