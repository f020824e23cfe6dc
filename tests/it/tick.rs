//! pmm-tick end to end: the rules in order on a real ledger, thresholds in the ledger,
//! determinism, cron overlap, turns and ticks together, signals, and bad input.

use crate::harness::{Pmm, Run};
use serde_json::Value;
use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A std `Command` for pmm-tick (spawnable), with the harness's environment.
pub(crate) fn tick_cmd(pmm: &Pmm) -> std::process::Command {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("pmm-tick"));
    c.current_dir(pmm.dir.path())
        .env_remove("RUST_BACKTRACE")
        .env("PMM_DB", &pmm.db)
        .env("PMM_NOW", "2025-11-24T05:55:41.194157Z")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn tick(pmm: &Pmm, slot: i64) -> Run {
    let r = pmm.run("pmm-tick", &["--slot", &slot.to_string()], "");
    assert_eq!(r.code, 0, "tick {slot}: {r:?}");
    r
}

/// The tick record of a run: (decision, reasoning).
fn decision(r: &Run) -> (String, String) {
    let t = r.of_type("tick").pop().expect("tick record");
    (
        t["decision"].as_str().unwrap_or("").to_string(),
        t["reasoning"].as_str().unwrap_or("").to_string(),
    )
}

fn of_kind(r: &Run, kind: &str) -> Vec<Value> {
    r.records()
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

fn replay(pmm: &Pmm, args: &[&str]) -> Vec<Value> {
    let r = pmm.run("pmm-replay", args, "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
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

fn verify_deep(pmm: &Pmm) {
    let r = pmm.run("pmm-verify", &["--deep", "--quiet"], "");
    assert_eq!(r.code, 0, "the ledger must verify deeply: {r:?}");
}

#[test]
fn the_rules_apply_in_order_on_a_real_ledger() {
    let pmm = Pmm::new();
    let s = script(
        &pmm,
        &[
            "Noted.\nCOMMIT: write the report",
            "Also this.\nCOMMIT: review the draft",
        ],
    );
    // Rule 1: nothing to do before the first turn.
    let r = tick(&pmm, 1);
    assert_eq!(
        decision(&r),
        ("idle".into(), "no metrics_turn recorded yet".into())
    );
    let kinds: Vec<String> = r
        .records()
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        kinds,
        [
            "config",
            "config",
            "autonomy_stimulus",
            "autonomy_rule_table",
            "autonomy_tick",
            "outcome_observation",
            "stability_metrics",
            "coherence_check"
        ],
        "on first use the default policy and retrieval configs (SPEC §2.5), then the \
         stimulus, the first rule table, the tick, its outcome, and the first stability and \
         coherence"
    );

    // Rule 2: a turn, then a kernel reflection about it.
    turn(&pmm, &s, "please write the report");
    let r = tick(&pmm, 2);
    assert_eq!(decision(&r).0, "reflect");
    assert_eq!(decision(&r).1, "no autonomous reflection recorded yet");
    let refl = of_kind(&r, "reflection");
    assert_eq!(refl.len(), 1);
    assert_eq!(refl[0]["meta"]["source"], "autonomy_kernel");
    assert_eq!(refl[0]["meta"]["staleness_threshold"], "20");
    assert_eq!(refl[0]["meta"]["delta_hash"].as_str().unwrap().len(), 64);
    let content: Value = serde_json::from_str(refl[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["commitments_reviewed"], 1);
    assert_eq!(content["changes"]["user_message"], 1);
    assert!(
        !refl[0]["content"].as_str().unwrap().contains("other_pmm"),
        "no hard-coded references"
    );

    // Correction 1: with nothing new, rule 3 becomes an idle that says so.
    let mut slot = 3;
    let mut reasons = Vec::new();
    while !reasons.iter().any(|(_, why): &(String, String)| {
        why.contains("but nothing changed since kernel reflection")
    }) {
        assert!(slot < 12, "{reasons:?}");
        reasons.push(decision(&tick(&pmm, slot)));
        slot += 1;
    }
    assert!(reasons.iter().all(|(d, _)| d == "idle"), "{reasons:?}");
    assert!(reasons
        .last()
        .unwrap()
        .1
        .starts_with("reflection_interval reached ("));

    // Rule 5: with rule 3 out of the way, the commitment stalls (20 events after its
    // opening) and is reviewed, once.
    let r = pmm.run("pmm-tick", &["--set", "reflection_interval=1000"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let mut reviews = Vec::new();
    for _ in 0..20 {
        let r = tick(&pmm, slot);
        slot += 1;
        let (d, why) = decision(&r);
        if d == "reflect" {
            assert!(
                why.starts_with("1 stalled commitments (age \u{2265} 20 events); prioritizing "),
                "{why}"
            );
            let c: Value =
                serde_json::from_str(of_kind(&r, "reflection")[0]["content"].as_str().unwrap())
                    .unwrap();
            assert_eq!(c["intent"], "commitment_review");
            assert_eq!(c["stalled"].as_array().unwrap().len(), 1);
            reviews.push(why);
        }
    }
    assert_eq!(reviews.len(), 1, "a stalled commitment is reviewed once");
    let r = pmm.run("pmm-tick", &["--set", "reflection_interval=10"], "");
    assert_eq!(r.code, 0, "{r:?}");

    // Rule 4: after another turn and its reflection, 50 quiet events since the last summary
    // give a summary; correction 2: of the two open commitments the older is closed.
    let summaries_before = replay(&pmm, &["--kind", "summary_update"]).len();
    turn(&pmm, &s, "and review the draft");
    let mut summarized = false;
    let mut auto_closed = Vec::new();
    for _ in 0..40 {
        let r = tick(&pmm, slot);
        slot += 1;
        if decision(&r).0 == "summarize" {
            assert!(decision(&r).1.starts_with("summary_interval reached ("));
            assert_eq!(of_kind(&r, "summary_update").len(), 1);
            summarized = true;
        }
        for c in of_kind(&r, "commitment_close") {
            assert_eq!(c["meta"]["reason"], "auto_close_idle_opt");
            assert_eq!(c["meta"]["source"], "autonomy_kernel");
            assert_eq!(c["meta"]["origin"], "assistant", "the origin is kept");
            assert!(c["meta"]["age"].as_i64().unwrap() > 27);
            auto_closed.push(c["meta"]["cid"].as_str().unwrap().to_string());
        }
    }
    assert!(summarized, "a summarize tick happened");
    assert!(replay(&pmm, &["--kind", "summary_update"]).len() > summaries_before);
    // Correction 2: of the two commitments, the older was closed and the newest stays open.
    assert_eq!(auto_closed.len(), 1, "{auto_closed:?}");
    let state = &replay(&pmm, &["--state"])[0];
    let open: Vec<&str> = state["open_commitments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    assert_eq!(open, ["review the draft"]);
    verify_deep(&pmm);
}

fn ledger_bytes_after_ticks(pmm: &Pmm, s: &str) -> (Vec<Value>, String) {
    for slot in 1..=50 {
        if [10, 25, 40].contains(&slot) {
            turn(pmm, s, &format!("message at slot {slot}"));
        }
        tick(pmm, slot);
    }
    let events = replay(pmm, &[]);
    let state = pmm.run("pmm-replay", &["--state"], "").stdout;
    (events, state)
}

#[test]
fn two_copies_given_the_same_ticks_append_identical_events() {
    let a = Pmm::new();
    let b = Pmm::new();
    let replies = [
        "First.\nCOMMIT: alpha",
        "Second.\nCOMMIT: beta\nCLAIM:name_change={\"new_name\":\"Echo\"}",
        "Third.\nCLOSE: 00000000",
        "Fourth.",
    ];
    let sa = script(&a, &replies);
    let sb = script(&b, &replies);
    turn(&a, &sa, "hello");
    std::fs::copy(&a.db, &b.db).unwrap();
    // b starts as a copy of a (the scripted adapter picks replies by the turn count).
    let (ea, sta) = ledger_bytes_after_ticks(&a, &sa);
    let (eb, stb) = ledger_bytes_after_ticks(&b, &sb);
    assert_eq!(ea.len(), eb.len());
    assert_eq!(ea, eb, "same events, same hashes");
    assert_eq!(sta, stb, "same --state bytes");
    let decisions: std::collections::BTreeSet<String> = ea
        .iter()
        .filter(|e| e["kind"] == "autonomy_tick")
        .map(|e| {
            serde_json::from_str::<Value>(e["content"].as_str().unwrap()).unwrap()["decision"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        decisions.contains("reflect") && decisions.contains("idle"),
        "{decisions:?}"
    );
    assert_eq!(
        ea.iter().filter(|e| e["kind"] == "autonomy_tick").count(),
        50
    );
    verify_deep(&a);
}

#[test]
fn three_ticks_for_one_slot_at_once_write_one_tick() {
    let pmm = Pmm::new();
    pmm.seed(3);
    let children: Vec<_> = (0..3)
        .map(|_| {
            tick_cmd(&pmm)
                .args(["--slot", "77"])
                .env("PMM_TEST_TICK_PAUSE_MS", "200")
                .spawn()
                .unwrap()
        })
        .collect();
    let mut skipped = 0;
    for mut c in children {
        let status = c.wait().unwrap();
        let mut out = String::new();
        c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        assert!(status.success(), "{out}");
        if out.contains("\"skipped\"") {
            skipped += 1;
        }
    }
    assert_eq!(skipped, 2);
    assert_eq!(replay(&pmm, &["--kind", "autonomy_stimulus"]).len(), 1);
    assert_eq!(replay(&pmm, &["--kind", "autonomy_tick"]).len(), 1);
    // And again later: still one.
    let r = tick(&pmm, 77);
    assert!(r.of_type("tick")[0]["skipped"].is_string());
    assert_eq!(replay(&pmm, &["--kind", "autonomy_tick"]).len(), 1);
}

#[test]
fn turns_and_a_loop_of_ticks_share_a_ledger() {
    let pmm = Pmm::new();
    let ticker = {
        let db = pmm.db.clone();
        let dir = pmm.dir.path().to_path_buf();
        std::thread::spawn(move || {
            for slot in 1..=60 {
                let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("pmm-tick"))
                    .current_dir(&dir)
                    .env("PMM_DB", &db)
                    .env_remove("RUST_BACKTRACE")
                    .args(["--slot", &slot.to_string()])
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{out:?}");
                std::thread::sleep(Duration::from_millis(15));
            }
        })
    };
    // A slow model (0.3 s per reply), so that ticks land while it thinks.
    let mut turns = Vec::new();
    for i in 0..5 {
        let r = pmm.run(
            "pmm-turn",
            &[
                "--adapter",
                "cmd",
                "--command",
                "cat >/dev/null; sleep 0.3; printf 'Sure.\\nCOMMIT: task'",
                &format!("turn {i}"),
            ],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
        turns.push(r);
    }
    ticker.join().unwrap();
    let r = pmm.run("pmm-verify", &["--deep", "--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let mut interleaved = 0;
    for t in &turns {
        let ids: Vec<i64> = t
            .records()
            .iter()
            .filter_map(|e| e["id"].as_i64())
            .collect();
        let events: Vec<Value> = t
            .records()
            .into_iter()
            .filter(|e| e["id"].is_i64())
            .collect();
        let reply = events
            .iter()
            .position(|e| e["kind"] == "assistant_message")
            .unwrap();
        let after = &ids[reply..];
        assert!(
            after.windows(2).all(|w| w[1] == w[0] + 1),
            "the turn's post-model events are contiguous: {after:?}"
        );
        if ids[reply] > ids[reply - 1] + 1 {
            interleaved += 1;
        }
    }
    assert!(
        interleaved > 0,
        "ticks should have landed while the model was thinking"
    );
    assert_eq!(replay(&pmm, &["--kind", "autonomy_tick"]).len(), 60);
}

#[test]
fn thresholds_set_in_the_ledger_hold_on_the_next_tick_and_in_replay() {
    let pmm = Pmm::new();
    let s = script(&pmm, &["Hi.", "Again."]);
    turn(&pmm, &s, "hello");
    tick(&pmm, 1);
    let before = replay(&pmm, &["--state"])[0]["last_event_id"]
        .as_i64()
        .unwrap();
    let r = pmm.run(
        "pmm-tick",
        &[
            "--set",
            "reflection_interval=3",
            "--set",
            "summary_interval=40",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let cfg = of_kind(&r, "config");
    assert_eq!(cfg.len(), 1);
    assert_eq!(cfg[0]["meta"]["source"], "pmm-tick");
    let c: Value = serde_json::from_str(cfg[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(c["type"], "autonomy_thresholds");
    assert_eq!(c["reflection_interval"], 3);
    assert_eq!(
        of_kind(&r, "autonomy_rule_table")[0]["content"],
        "{reflection_interval:3,summary_interval:40,commitment_staleness:20,commitment_auto_close:27}"
    );
    let th = r.of_type("thresholds")[0].clone();
    assert_eq!(
        (th["reflection_interval"].clone(), th["changed"].clone()),
        (3.into(), true.into())
    );
    // The same again changes nothing and writes nothing.
    let again = pmm.run("pmm-tick", &["--set", "reflection_interval=3"], "");
    assert_eq!(again.code, 0);
    assert!(of_kind(&again, "config").is_empty());
    assert_eq!(again.of_type("thresholds")[0]["changed"], false);

    // Replay reproduces the thresholds in force at any event.
    let now = &replay(&pmm, &["--state"])[0]["thresholds"];
    assert_eq!(now["reflection_interval"], 3);
    assert_eq!(now["summary_interval"], 40);
    let then = &replay(&pmm, &["--state", "--at", &before.to_string()])[0]["thresholds"];
    assert_eq!(then["reflection_interval"], 10);

    // The next tick (a new process: a restart) uses them. A turn gives it something new.
    turn(&pmm, &s, "again");
    tick(&pmm, 2); // reflects on the turn
    let mut saw = false;
    for slot in 3..8 {
        let r = tick(&pmm, slot);
        let (_, why) = decision(&r);
        // A tick writes three to five events: the interval of 3 is reached after one, where
        // the default of 10 would need three.
        let n = why
            .strip_prefix("reflection_interval reached (")
            .and_then(|r| r.split(')').next())
            .and_then(|n| n.parse::<i64>().ok());
        if n.is_some_and(|n| (3..10).contains(&n)) {
            saw = true;
        }
    }
    assert!(saw, "the interval of 3 was used");
}

#[test]
fn autonomy_metrics_every_tenth_tick_match_pmm_metrics() {
    let pmm = Pmm::new();
    let s = script(&pmm, &["One.\nCOMMIT: first", "Two.\nCOMMIT: second"]);
    for slot in 1..=30 {
        if slot == 3 || slot == 14 {
            turn(&pmm, &s, &format!("m{slot}"));
        }
        let r = tick(&pmm, slot);
        let m = of_kind(&r, "autonomy_metrics");
        if slot % 10 != 0 {
            assert!(m.is_empty(), "slot {slot}");
            continue;
        }
        assert_eq!(m.len(), 1, "slot {slot}");
        assert_eq!(m[0]["meta"]["source"], "autonomy_tracker");
        let c: Value = serde_json::from_str(m[0]["content"].as_str().unwrap()).unwrap();
        let pm = pmm.run("pmm-metrics", &["--deterministic"], "");
        assert_eq!(pm.code, 0, "{pm:?}");
        let pm = pm.records().pop().unwrap();
        let a = &pm["autonomy"];
        let decided = |k: &str| a["decisions"][k].as_u64().unwrap_or(0);
        assert_eq!(c["ticks_total"], a["ticks"]);
        assert_eq!(c["ticks_total"], slot);
        assert_eq!(c["reflect_count"], decided("reflect"));
        assert_eq!(c["intention_summarize_count"], decided("summarize"));
        assert_eq!(
            c["idle_count"].as_u64().unwrap(),
            a["ticks"].as_u64().unwrap() - decided("reflect") - decided("summarize")
        );
        assert_eq!(c["last_reflection_id"], a["last_reflection_id"]);
        assert_eq!(
            c["open_commitments"].as_u64().unwrap(),
            pm["open_commitments"].as_array().unwrap().len() as u64
        );
        assert_eq!(
            c["summarize_count"].as_u64().unwrap(),
            pm["kinds"]["summary_update"].as_u64().unwrap_or(0)
        );
    }
}

#[test]
fn sigterm_during_every_finishes_the_tick_and_exits_0() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let mut child = tick_cmd(&pmm)
        .args(["--every", "100ms", "--interval", "1"])
        .env_remove("PMM_NOW")
        .env("PMM_TEST_TICK_PAUSE_MS", "600")
        .spawn()
        .unwrap();
    // Wait until a tick holds the write lock, then signal it mid-tick.
    wait_for_write_lock(&pmm);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let stimuli = replay(&pmm, &["--kind", "autonomy_stimulus"]).len();
    let ticks = replay(&pmm, &["--kind", "autonomy_tick"]).len();
    assert!(ticks >= 1, "the tick under way was finished");
    assert_eq!(stimuli, ticks, "no partial tick");
    let r = pmm.run("pmm-verify", &["--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
}

pub(crate) fn wait_for_write_lock(pmm: &Pmm) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no tick took the write lock");
        if pmm.db.exists() {
            if let Ok(conn) = rusqlite::Connection::open(&pmm.db) {
                conn.busy_timeout(Duration::from_millis(0)).unwrap();
                if conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").is_err() {
                    return;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigkill_in_the_middle_of_a_tick_leaves_all_of_it_or_none() {
    let pmm = Pmm::new();
    let s = script(&pmm, &["Hi.\nCOMMIT: a thing"]);
    turn(&pmm, &s, "hello");
    let events_before = pmm.count();
    let mut child = tick_cmd(&pmm)
        .args(["--slot", "9"])
        .env("PMM_TEST_TICK_PAUSE_MS", "5000")
        .spawn()
        .unwrap();
    wait_for_write_lock(&pmm);
    child.kill().unwrap();
    assert!(!child.wait().unwrap().success());
    let r = pmm.run("pmm-verify", &["--deep", "--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(pmm.count(), events_before, "none of the killed tick");
    // The slot was never ticked, so it can be now, whole.
    let r = tick(&pmm, 9);
    assert_eq!(decision(&r).0, "reflect");
    assert_eq!(of_kind(&r, "autonomy_stimulus").len(), 1);
    assert_eq!(of_kind(&r, "reflection").len(), 1);
    verify_deep(&pmm);
}

#[test]
fn dry_run_prints_the_decision_and_writes_nothing() {
    let pmm = Pmm::new();
    let s = script(&pmm, &["Hi."]);
    turn(&pmm, &s, "hello");
    let bytes = std::fs::read(&pmm.db).unwrap();
    let r = pmm.run("pmm-tick", &["--dry-run", "--slot", "4"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let d = &r.records()[0];
    assert_eq!(d["type"], "decision");
    assert_eq!(d["decision"], "reflect");
    assert_eq!(d["slot"], 4);
    assert_eq!(d["already_ticked"], Value::Null);
    assert!(d["reflection"]["changes"].is_object());
    assert_eq!(std::fs::read(&pmm.db).unwrap(), bytes, "not a byte changed");
    // The decision is the one the tick then makes.
    let t = tick(&pmm, 4);
    assert_eq!(decision(&t).1, d["reasoning"].as_str().unwrap());
    let again = pmm.run("pmm-tick", &["--dry-run", "--slot", "4"], "");
    assert!(again.records()[0]["already_ticked"].is_i64());
}

#[test]
fn bad_input_is_refused_with_exit_2() {
    let pmm = Pmm::new();
    pmm.seed(1);
    for (args, needle) in [
        (vec!["--set", "reflection_intervl=3"], "unknown threshold"),
        (vec!["--set", "summary_interval=0"], "out of range"),
        (vec!["--set", "summary_interval"], "KEY=VALUE"),
        (vec!["--every", "soon"], "soon"),
        (vec!["--every", "1s", "--slot", "3"], "--slot"),
        (vec!["--interval", "0"], "--interval"),
        (vec!["--slot", "x"], "--slot"),
    ] {
        let r = pmm.run("pmm-tick", &args, "");
        r.assert_error("pmm-tick", &[needle]);
    }
    let r = pmm.run(
        "pmm-tick",
        &[
            "--dry-run",
            "--db",
            pmm.path("missing.db").to_str().unwrap(),
        ],
        "",
    );
    r.assert_error("pmm-tick", &["no such ledger"]);
    assert!(!pmm.path("missing.db").exists());
    assert_eq!(pmm.count(), 1, "nothing was written");
}

#[test]
fn a_slot_is_ticked_once_whatever_order_the_slots_come_in() {
    let pmm = Pmm::new();
    pmm.seed(2);
    tick(&pmm, 100);
    tick(&pmm, 50);
    let r = tick(&pmm, 100);
    assert!(r.of_type("tick")[0]["skipped"].is_string(), "{r:?}");
    let r = tick(&pmm, 50);
    assert!(r.of_type("tick")[0]["skipped"].is_string(), "{r:?}");
    // Another interval numbers its slots afresh: its slot 100 is another slot.
    let r = pmm.run("pmm-tick", &["--slot", "100", "--interval", "60"], "");
    assert_eq!(r.code, 0);
    assert_eq!(r.of_type("tick")[0]["decision"], "idle");
    let sixty = of_kind(&r, "autonomy_stimulus");
    assert_eq!(sixty[0]["meta"]["interval"], 60);
    // Mixed intervals on the clock: each slot once.
    for _ in 0..2 {
        pmm.run("pmm-tick", &[], "");
        pmm.run("pmm-tick", &["--interval", "60"], "");
    }
    let stimuli = replay(&pmm, &["--kind", "autonomy_stimulus"]);
    let mut ids: Vec<&str> = stimuli
        .iter()
        .map(|e| e["meta"]["slot_id"].as_str().unwrap())
        .collect();
    assert_eq!(stimuli.len(), 5, "100, 50, 100@60, the clock's @10 and @60");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5, "no slot twice");
    verify_deep(&pmm);
}

#[test]
fn a_tick_the_policy_forbids_is_a_violation_and_writes_nothing_else() {
    let pmm = Pmm::new();
    let s = script(&pmm, &["Hi."]);
    turn(&pmm, &s, "hello");
    // An operator forbids the kernel's config writes (the rule table is not sensitive, the
    // threshold config is).
    let policy = r#"{"kind":"config","content":"{\"forbid_sources\":{\"pmm-tick\":[\"config\"]},\"type\":\"policy\"}","meta":{"source":"operator"}}"#;
    let r = pmm.run("pmm-append", &[], &format!("{policy}\n"));
    assert_eq!(r.code, 0, "{r:?}");
    let before = pmm.count();
    let r = pmm.run("pmm-tick", &["--set", "summary_interval=40"], "");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains(
            "policy forbids actor 'pmm-tick' writing 'config'; violation recorded as event"
        ),
        "{}",
        r.stderr
    );
    let v = replay(&pmm, &["--kind", "violation"]);
    assert_eq!(v.len(), 1);
    assert_eq!(pmm.count(), before + 1, "only the violation");
    assert_eq!(
        replay(&pmm, &["--state"])[0]["thresholds"]["summary_interval"],
        50
    );
}

/// `pmm-tick --checkpoint-key K --checkpoint-out F` signs a checkpoint after every tick,
/// written beside the ledger (never in it); `pmm-verify --checkpoint` checks it; a key that
/// is not one is refused before anything is written.
#[test]
fn a_tick_signs_a_checkpoint_beside_the_ledger() {
    let pmm = Pmm::new();
    let key = pmm.path("log.key");
    let key = key.to_str().unwrap();
    let r = pmm.run(
        "pmm-export",
        &["--keygen", "tick.test/log", "--key", key],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let vkey = r.stdout.trim().to_string();
    let cp = pmm.path("cp.txt");
    let cp = cp.to_str().unwrap();
    for slot in [100, 101] {
        let r = pmm.run(
            "pmm-tick",
            &[
                "--slot",
                &slot.to_string(),
                "--checkpoint-key",
                key,
                "--checkpoint-out",
                cp,
            ],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
        let rec = r.of_type("checkpoint").pop().expect("a checkpoint record");
        assert_eq!(rec["size"].as_u64(), Some(pmm.count()));
        let v = pmm.run("pmm-verify", &["--checkpoint", cp, "--key", &vkey], "");
        assert_eq!(v.code, 0, "{v:?}");
    }
    let n = pmm.count();
    let r = pmm.run(
        "pmm-tick",
        &[
            "--slot",
            "102",
            "--checkpoint-key",
            cp,
            "--checkpoint-out",
            cp,
        ],
        "",
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(pmm.count(), n, "nothing written");
    let db = pmm.db.to_str().unwrap();
    let r = pmm.run(
        "pmm-tick",
        &[
            "--slot",
            "102",
            "--checkpoint-key",
            key,
            "--checkpoint-out",
            db,
        ],
        "",
    );
    assert_eq!(r.code, 2, "never onto the ledger: {r:?}");
    assert_eq!(pmm.count(), n);
}
