//! Retention (issue 46, item 3): a policy `config` event that `pmm-tick` applies as erasures
//! with reason `retention`, per slot by the slot's time (not the clock), over a simulated year
//! with a pinned clock; two processes ticking the same slots erase each event once; `--deep`
//! recomputes every pass.

use crate::harness::Pmm;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The slot (10-second slots from 2025-11-01T00:00:00Z) whose start is `day` at midnight UTC.
fn slot_of(day: &str) -> i64 {
    let t = chrono::DateTime::parse_from_rfc3339(&format!("{day}T00:00:00Z")).unwrap();
    (t.timestamp() - 1_761_955_200) / 10
}

fn append_dated(pmm: &Pmm, lines: &[(String, &str, &str)]) {
    let input: String = lines
        .iter()
        .map(|(ts, kind, source)| {
            format!("{}\n", json!({"ts": ts, "kind": kind, "content": format!("{kind} by {source} at {ts}"), "meta": {"source": source}}))
        })
        .collect();
    let r = pmm.run("pmm-append", &["--keep-ts"], &input);
    assert_eq!(r.code, 0, "{r:?}");
}

/// The `erasure` events with reason retention: erased id → (the pass's slot, the rule).
fn retained(pmm: &Pmm) -> BTreeMap<i64, (i64, i64)> {
    let mut out = BTreeMap::new();
    for e in pmm.run("pmm-replay", &["--kind", "erasure"], "").records() {
        let m = &e["meta"];
        assert_eq!(m["reason"], "retention", "{e}");
        let id = m["erased_id"].as_i64().unwrap();
        let pass = (
            m["retention"]["slot"].as_i64().unwrap(),
            m["retention"]["rule"].as_i64().unwrap(),
        );
        assert!(out.insert(id, pass).is_none(), "event {id} erased twice");
    }
    out
}

/// Appends `policy` as a `config` event by the owner.
fn append_policy(pmm: &Pmm, policy: Value) {
    let args = [
        "--kind",
        "config",
        "--content",
        &policy.to_string(),
        "--meta",
        r#"{"source":"owner"}"#,
    ];
    let r = pmm.run("pmm-append", &args, "");
    assert_eq!(r.code, 0, "{r:?}");
}

fn tick(pmm: &Pmm, slot: i64, now: &str) {
    let r = pmm.run("pmm-tick", &["--slot", &slot.to_string(), "--now", now], "");
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn a_simulated_year_erases_each_event_once_by_the_slot_that_was_due() {
    let pmm = Pmm::new();
    // 2026: a user message on the 1st of each month, a guest message on the 15th.
    let mut lines = Vec::new();
    for m in 1..=12 {
        lines.push((format!("2026-{m:02}-01T12:00:00Z"), "user_message", "owner"));
        lines.push((
            format!("2026-{m:02}-15T12:00:00Z"),
            "user_message",
            "mcp:guest",
        ));
    }
    append_dated(&pmm, &lines);
    let policy = json!({"type": "retention", "rules": [
        {"kind": "user_message", "older_than": "365d"},
        {"source": "mcp:guest", "older_than": "30d"},
    ]});
    append_policy(&pmm, policy);
    let messages: BTreeMap<i64, (String, String)> = pmm
        .run("pmm-replay", &["--kind", "user_message"], "")
        .records()
        .iter()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                (
                    e["ts"].as_str().unwrap().to_string(),
                    e["meta"]["source"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect();
    // Monthly ticks from February 2026 to March 2027; a clock that says something else.
    let mut ticks = Vec::new();
    for i in 0..14 {
        let (y, m) = (2026 + (i + 1) / 12, (i + 1) % 12 + 1);
        ticks.push((format!("{y}-{m:02}-01"), slot_of(&format!("{y}-{m:02}-01"))));
    }
    for (day, slot) in &ticks {
        tick(&pmm, *slot, "2030-06-01T00:00:00Z");
        // After each pass: exactly the events older than a rule's age at this slot are gone.
        let gone = retained(&pmm);
        for (id, (ts, source)) in &messages {
            let t = chrono::DateTime::parse_from_rfc3339(ts).unwrap();
            let at = chrono::DateTime::parse_from_rfc3339(&format!("{day}T00:00:00Z")).unwrap();
            let age = (at - t).num_days();
            let due = age > 365 || (source == "mcp:guest" && age > 30);
            assert_eq!(
                gone.contains_key(id),
                due,
                "event {id} ({ts}, {source}) at {day}"
            );
        }
    }
    // Each was erased by the first slot at which it was due.
    let gone = retained(&pmm);
    for (id, (slot, _)) in &gone {
        let (ts, source) = &messages[id];
        let t = chrono::DateTime::parse_from_rfc3339(ts).unwrap();
        let first_due = ticks
            .iter()
            .find(|(day, _)| {
                let at = chrono::DateTime::parse_from_rfc3339(&format!("{day}T00:00:00Z")).unwrap();
                let age = (at - t).num_days();
                age > 365 || (source == "mcp:guest" && age > 30)
            })
            .unwrap();
        assert_eq!(*slot, first_due.1, "event {id}");
    }
    assert!(gone.len() > 12, "{gone:?}");
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.findings().len(), 0, "{r:?}");
    assert_eq!(r.summary()["erased"].as_u64(), Some(gone.len() as u64));
    assert_eq!(
        r.summary()["deep"]["retention_erasures"].as_u64(),
        Some(gone.len() as u64),
        "{r:?}"
    );
}

#[test]
fn two_processes_ticking_the_same_slots_erase_each_event_once() {
    let pmm = Pmm::new();
    let lines: Vec<(String, &str, &str)> = (0..40)
        .map(|d| {
            (
                format!("2026-01-{:02}T08:00:00Z", d % 28 + 1),
                "user_message",
                "mcp:guest",
            )
        })
        .collect();
    let mut sorted = lines.clone();
    sorted.sort();
    append_dated(&pmm, &sorted);
    let policy =
        json!({"type": "retention", "rules": [{"source": "mcp:guest", "older_than": "7d"}]});
    append_policy(&pmm, policy);
    let slots: Vec<i64> = ["2026-01-10", "2026-01-20", "2026-02-10"]
        .iter()
        .map(|d| slot_of(d))
        .collect();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for slot in &slots {
                    let r = pmm.run("pmm-tick", &["--slot", &slot.to_string()], "");
                    assert_eq!(r.code, 0, "{r:?}");
                }
            });
        }
    });
    let gone = retained(&pmm);
    assert_eq!(gone.len(), 40, "{gone:?}");
    let stimuli = pmm
        .run("pmm-replay", &["--kind", "autonomy_stimulus"], "")
        .records();
    assert_eq!(stimuli.len(), 3, "one tick per slot");
    let by_slot: Vec<i64> = gone.values().map(|(s, _)| *s).collect();
    assert!(by_slot.iter().all(|s| slots.contains(s)));
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let _: Value = r.summary();
}

#[test]
fn a_retention_policy_that_does_not_read_is_refused() {
    let pmm = Pmm::new();
    for bad in [
        json!({"type": "retention", "rules": [{"older_than": "30d"}]}),
        json!({"type": "retention", "rules": [{"kind": "user_message", "older_than": "soon"}]}),
        json!({"type": "retention", "rules": [{"kind": "erasure", "older_than": "1d"}]}),
        json!({"type": "retention"}),
    ] {
        let r = pmm.run(
            "pmm-append",
            &[
                "--kind",
                "config",
                "--content",
                &bad.to_string(),
                "--meta",
                r#"{"source":"owner"}"#,
            ],
            "",
        );
        assert_eq!(r.code, 1, "{bad}: {r:?}");
        assert!(r.stderr.contains("retention"), "{r:?}");
    }
}

/// A ledger of five January guest messages about the garden (with the guest retention rule
/// when `policy`), a scripted turn about it, then a thinking tick at 2026-02-10 against an
/// Ollama stub: the tick record and what the model was sent.
fn think_after_guests(pmm: &Pmm, policy: bool) -> (Value, String) {
    use crate::stub::{Stub, StubResponse};
    let input: String = (1..=5)
        .map(|d| {
            let ev = json!({"ts": format!("2026-01-0{d}T08:00:00Z"), "kind": "user_message",
                "content": format!("the guest garden plan number {d}"), "meta": {"source": "mcp:guest"}});
            format!("{ev}\n")
        })
        .collect();
    let r = pmm.run("pmm-append", &["--keep-ts"], &input);
    assert_eq!(r.code, 0, "{r:?}");
    if policy {
        append_policy(
            pmm,
            json!({"type": "retention", "rules": [{"source": "mcp:guest", "older_than": "7d"}]}),
        );
    }
    let script = pmm.path("turns.jsonl");
    // The scripted model answers the ledger's Nth user message with line N: the guests' five
    // come first.
    std::fs::write(&script, "\"Noted.\"\n".repeat(6)).unwrap();
    let script = script.to_string_lossy().into_owned();
    let msg = "what was the guest garden plan?";
    let r = pmm.run(
        "pmm-turn",
        &["--adapter", "scripted", "--script", &script, msg],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let ollama = Stub::start(vec![StubResponse::Ollama("Worth a look.".into())]);
    let slot = slot_of("2026-02-10").to_string();
    let mut c = pmm.std_cmd("pmm-tick");
    c.args(["--slot", &slot, "--adapter", "ollama"])
        .env("OLLAMA_HOST", ollama.url())
        .stdin(std::process::Stdio::null());
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let tick: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "tick")
        .expect("a tick record");
    assert_eq!(tick["think"]["asked"], true, "{tick}");
    assert_eq!(ollama.requests().len(), 1);
    (tick, ollama.requests()[0].body.to_string())
}

/// A tick that asks a model runs the slot's retention pass too, before the prompt is made:
/// the model is never sent what the policy says is gone (without the policy it is sent), and
/// `--deep` recomputes the pass.
#[test]
fn a_thinking_tick_erases_what_is_due_before_it_asks_the_model() {
    let (_, sent) = think_after_guests(&Pmm::new(), false);
    assert!(sent.contains("guest garden plan number"), "{sent}");
    let pmm = Pmm::new();
    let (_, sent) = think_after_guests(&pmm, true);
    assert!(!sent.contains("guest garden plan number"), "{sent}");
    let gone = retained(&pmm);
    assert_eq!(
        gone.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    let slot = slot_of("2026-02-10");
    assert!(gone.values().all(|(s, _)| *s == slot), "{gone:?}");
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.summary()["deep"]["retention_erasures"], 5, "{r:?}");
}

/// On PostgreSQL: two hosts, each with its own cache, ticking the same slots at once erase
/// each event once, by one pass a slot; `--deep` is clean on both.
#[test]
fn two_postgres_hosts_ticking_the_same_slots_erase_each_event_once() {
    use crate::pgserver::PgServer;
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database();
    let (a, b) = (crate::harness::pg_host(&url), crate::harness::pg_host(&url));
    let mut lines: Vec<(String, &str, &str)> = (0..40)
        .map(|d| {
            let day = format!("2026-01-{:02}T08:00:00Z", d % 28 + 1);
            (day, "user_message", "mcp:guest")
        })
        .collect();
    lines.sort();
    append_dated(&a, &lines);
    append_policy(
        &a,
        json!({"type": "retention", "rules": [{"source": "mcp:guest", "older_than": "7d"}]}),
    );
    let slots: Vec<i64> = ["2026-01-10", "2026-01-20", "2026-02-10"]
        .iter()
        .map(|d| slot_of(d))
        .collect();
    std::thread::scope(|s| {
        for h in [&a, &b] {
            let slots = &slots;
            s.spawn(move || {
                for slot in slots {
                    let r = h.run("pmm-tick", &["--slot", &slot.to_string()], "");
                    assert_eq!(r.code, 0, "{r:?}");
                }
            });
        }
    });
    for h in [&a, &b] {
        let gone = retained(h);
        assert_eq!(gone.len(), 40, "{gone:?}");
        assert!(gone.values().all(|(s, _)| slots.contains(s)), "{gone:?}");
        let stimuli = h.run("pmm-replay", &["--kind", "autonomy_stimulus"], "");
        assert_eq!(stimuli.records().len(), 3, "one tick per slot");
        let r = h.run("pmm-verify", &["--quiet", "--deep"], "");
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.summary()["deep"]["retention_erasures"], 40, "{r:?}");
    }
}
