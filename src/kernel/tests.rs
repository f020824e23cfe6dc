use super::*;

fn th() -> Thresholds {
    Thresholds::default()
}

fn open(cid: &str, at: i64) -> OpenCommitment {
    OpenCommitment {
        cid: cid.into(),
        opened_at: at,
        origin: "assistant".into(),
        exec_bound: false,
        stays_open: false,
    }
}

fn kernel_ref(id: i64, stalled: &[&str]) -> Option<KernelReflection> {
    Some(KernelReflection {
        id,
        stalled: stalled.iter().map(|s| s.to_string()).collect(),
        delta_hash: None,
    })
}

fn changes(kinds: &[(&str, u64)]) -> Vec<(String, u64)> {
    kinds.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

#[test]
fn rule_1_no_turn_yet_is_idle() {
    let v = View {
        head: 5,
        ..View::default()
    };
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Idle);
    assert_eq!(d.reasoning, "no metrics_turn recorded yet");
    assert!(d.evidence.is_empty());
}

#[test]
fn rule_2_a_turn_without_a_kernel_reflection_after_it_reflects() {
    let mut v = View {
        head: 20,
        last_metrics_turn: Some(15),
        changes: changes(&[
            ("user_message", 1),
            ("assistant_message", 1),
            ("metrics_turn", 1),
        ]),
        ..View::default()
    };
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Reflect);
    assert_eq!(d.reasoning, "no autonomous reflection recorded yet");
    assert_eq!(d.evidence, vec![15]);
    let r = d.reflection.unwrap();
    assert_eq!(r["intent"], "user_message_analysis");
    assert_eq!(r["changes"]["metrics_turn"], 1);
    assert_eq!(r["since_event"], Value::Null);

    v.last_kernel_reflection = kernel_ref(10, &[]);
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Reflect);
    assert_eq!(
        d.reasoning,
        "no autonomous reflection since the latest metrics_turn (15)"
    );
}

#[test]
fn rule_3_the_reflection_interval_reflects() {
    let v = View {
        head: 30,
        last_metrics_turn: Some(15),
        last_kernel_reflection: kernel_ref(20, &[]),
        changes: changes(&[("claim", 2), ("commitment_open", 2)]),
        ..View::default()
    };
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Reflect);
    assert_eq!(d.reasoning, "reflection_interval reached (10)");
    assert_eq!(d.evidence, vec![30]);
    // Ties go to the kind seen first.
    assert_eq!(d.reflection.unwrap()["intent"], "claim_analysis");
    let v = View { head: 29, ..v };
    assert_eq!(decide(&v, &th()).decision, Action::Idle);
}

#[test]
fn a_reflect_that_would_repeat_the_previous_one_is_idle() {
    let v = View {
        head: 40,
        last_metrics_turn: Some(15),
        last_kernel_reflection: kernel_ref(20, &[]),
        ..View::default()
    };
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Idle);
    assert_eq!(
        d.reasoning,
        "reflection_interval reached (20), but nothing changed since kernel reflection 20"
    );
    assert_eq!(d.evidence, vec![20]);
    assert!(d.reflection.is_none());
}

#[test]
fn rule_4_the_summary_interval_summarizes_after_a_kernel_reflection() {
    let v = View {
        head: 105,
        last_metrics_turn: Some(90),
        last_kernel_reflection: kernel_ref(100, &[]),
        last_summary: Some(50),
        ..View::default()
    };
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Summarize);
    assert_eq!(d.reasoning, "summary_interval reached (55)");
    // Without a kernel reflection since the summary, no summary.
    let v = View {
        last_summary: Some(100),
        last_kernel_reflection: kernel_ref(99, &[]),
        head: 105,
        ..v
    };
    assert_eq!(decide(&v, &th()).decision, Action::Idle);
}

#[test]
fn rule_5_a_stalled_commitment_is_reviewed_once() {
    let mut v = View {
        head: 60,
        last_metrics_turn: Some(30),
        last_kernel_reflection: kernel_ref(55, &[]),
        last_summary: Some(58),
        open: vec![open("aaaa0001", 40)],
        ..View::default()
    };
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Reflect);
    assert_eq!(
        d.reasoning,
        "1 stalled commitments (age \u{2265} 20 events); prioritizing aaaa0001"
    );
    assert_eq!(d.evidence, vec![40]);
    let r = d.reflection.unwrap();
    assert_eq!(r["intent"], "commitment_review");
    assert_eq!(r["stalled"], json!(["aaaa0001"]));
    assert_eq!(r["stale"], 1);
    assert_eq!(r["outcome"], "1 open, stale=1");
    // Once reviewed, the same stalled set with nothing new is not reviewed again.
    v.last_kernel_reflection = kernel_ref(59, &["aaaa0001"]);
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Idle);
    assert!(d
        .reasoning
        .ends_with("but nothing changed since kernel reflection 59"));
    // The kernel's own goals are not reviewed.
    v.open[0].origin = "autonomy_kernel".into();
    v.last_kernel_reflection = kernel_ref(55, &[]);
    assert_eq!(decide(&v, &th()).reasoning, "no autonomous action needed");
}

#[test]
fn rule_6_otherwise_idle() {
    let v = View {
        head: 60,
        last_metrics_turn: Some(30),
        last_kernel_reflection: kernel_ref(55, &[]),
        last_summary: Some(58),
        ..View::default()
    };
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Idle);
    assert_eq!(d.reasoning, "no autonomous action needed");
}

#[test]
fn auto_close_needs_two_open_and_leaves_the_newest() {
    let mut v = View {
        head: 100,
        open: vec![open("old", 10)],
        ..View::default()
    };
    // One open commitment, however old, stays open.
    assert!(decide(&v, &th()).auto_close.is_empty());
    v.open = vec![
        open("b", 20),
        open("a", 10),
        open("young", 80),
        open("newest", 90),
    ];
    v.open.sort_by_key(|c| c.opened_at);
    let d = decide(&v, &th());
    let closed: Vec<(&str, i64)> = d
        .auto_close
        .iter()
        .map(|a| (a.cid.as_str(), a.age))
        .collect();
    assert_eq!(closed, vec![("a", 90), ("b", 80)]);
    // Even the newest open commitment past the threshold stays.
    v.open = vec![open("a", 10), open("b", 20)];
    let d = decide(&v, &th());
    assert_eq!(d.auto_close.len(), 1);
    assert_eq!(d.auto_close[0].cid, "a");
    // Exec-bound commitments are exempt.
    v.open[0].exec_bound = true;
    assert!(decide(&v, &th()).auto_close.is_empty());
}

#[test]
fn auto_closed_commitments_are_neither_stalled_nor_counted() {
    let v = View {
        head: 100,
        last_metrics_turn: Some(30),
        last_kernel_reflection: kernel_ref(95, &[]),
        last_summary: Some(96),
        open: vec![open("a", 10), open("b", 85)],
        ..View::default()
    };
    let d = decide(&v, &th());
    assert_eq!(d.auto_close.len(), 1);
    // `b` is not stalled (15 < 20): nothing to review; the close alone is not a reflection.
    assert_eq!(d.decision, Action::Idle);
    let v = View { head: 106, ..v };
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Reflect);
    let r = d.reflection.unwrap();
    assert_eq!(r["auto_closed"], json!(["a"]));
    assert_eq!(r["commitments_reviewed"], 1);
    assert_eq!(r["stalled"], json!(["b"]));
}

#[test]
fn thresholds_change_the_rules() {
    let v = View {
        head: 25,
        last_metrics_turn: Some(15),
        last_kernel_reflection: kernel_ref(20, &[]),
        changes: changes(&[("claim", 1)]),
        ..View::default()
    };
    assert_eq!(decide(&v, &th()).decision, Action::Idle);
    let t = Thresholds {
        reflection_interval: 5,
        ..th()
    };
    assert_eq!(decide(&v, &t).decision, Action::Reflect);
}

#[test]
fn slots_are_named_as_the_reference_names_them() {
    let s = Slot::new(200854, 10);
    assert_eq!(s.slot_id, slot::reference_slot_id(200854));
    let t = chrono::DateTime::from_timestamp(slot::EPOCH_UNIX + 25, 0).unwrap();
    assert_eq!(Slot::at(t, 10).slot, 2);
    assert_eq!(Slot::at(t, 60).slot, 0);
}

#[test]
fn a_repeated_reflect_gives_way_to_a_due_summary() {
    // Quiet since kernel reflection 100, which came after summary 50: the reflect of rule 3
    // would say nothing new, so rule 4's summary goes ahead — once.
    let v = View {
        head: 160,
        last_metrics_turn: Some(90),
        last_kernel_reflection: kernel_ref(100, &[]),
        last_summary: Some(50),
        ..View::default()
    };
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Summarize);
    assert_eq!(d.reasoning, "summary_interval reached (110)");
    // After the summary (not itself a change), nothing is due until something happens.
    let v = View {
        head: 230,
        last_summary: Some(161),
        ..v
    };
    let d = decide(&v, &th());
    assert_eq!(d.decision, Action::Idle);
    assert_eq!(
        d.reasoning,
        "reflection_interval reached (130), but nothing changed since kernel reflection 100"
    );
}

/// The tick on the in-memory log ([`crate::store::memory`]): its decisions and what it
/// records, with no file and no database.
mod on_memory {
    use super::*;
    use crate::event::{Clock, Kind};
    use crate::store::memory::Memory;
    use crate::store::EventLog;

    fn clock() -> Clock {
        Clock::pinned("2025-11-24T05:55:41.123456Z").unwrap()
    }

    fn done(t: tick::Ticked) -> tick::TickDone {
        match t {
            tick::Ticked::Done(d) => d,
            other => panic!("a tick written: {other:?}"),
        }
    }

    /// On a fresh log the tick is idle, and records the defaults, its stimulus and its
    /// decision, in that order.
    #[test]
    fn a_first_tick_is_idle_and_records_its_decision() {
        let mut m = Memory::new();
        let slot = Slot::new(7, crate::formats::slot::INTERVAL_SECS);
        let d = done(tick::run(&mut m, &slot, &clock()).unwrap());
        assert_eq!(d.decision.decision, Action::Idle);
        assert_eq!(d.decision.reasoning, "no metrics_turn recorded yet");
        let kinds: Vec<&str> = d.events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds[..3], ["config", "config", "autonomy_stimulus"]);
        let tick = d
            .events
            .iter()
            .find(|e| e.kind == Kind::AutonomyTick)
            .unwrap();
        let content: Value = serde_json::from_str(&tick.content).unwrap();
        assert_eq!(content["decision"], "idle");
        assert!(d.events[2].content.contains(&slot.slot_id));
        assert_eq!(m.max_id().unwrap(), d.events.last().unwrap().id);
    }

    /// A slot is ticked once: the second run finds its stimulus and writes nothing.
    #[test]
    fn a_slot_already_ticked_writes_nothing() {
        let mut m = Memory::new();
        let slot = Slot::new(7, crate::formats::slot::INTERVAL_SECS);
        let first = done(tick::run(&mut m, &slot, &clock()).unwrap());
        let head = m.max_id().unwrap();
        match tick::run(&mut m, &slot, &clock()).unwrap() {
            tick::Ticked::AlreadyTicked { stimulus, .. } => {
                assert_eq!(Some(stimulus), first.events.get(2).map(|e| e.id));
            }
            other => panic!("already ticked: {other:?}"),
        }
        assert_eq!(m.max_id().unwrap(), head);
    }

    /// After a turn (a `metrics_turn` with no kernel reflection after it), the tick reflects
    /// and writes the kernel's reflection, evidence the turn's metrics.
    #[test]
    fn a_tick_after_a_turn_reflects() {
        let mut m = Memory::new();
        let c = clock();
        let mut meta = serde_json::Map::new();
        meta.insert("source".into(), "pmm-turn".into());
        let metrics = crate::event::NewEvent::new(Kind::MetricsTurn, "{}", meta).unwrap();
        let turn = crate::session::append(&mut m, &metrics, &c).unwrap();
        let slot = Slot::new(8, crate::formats::slot::INTERVAL_SECS);
        let d = done(tick::run(&mut m, &slot, &c).unwrap());
        assert_eq!(d.decision.decision, Action::Reflect);
        assert_eq!(d.decision.evidence, vec![turn.id]);
        let refl = d
            .events
            .iter()
            .find(|e| e.kind == Kind::Reflection)
            .unwrap();
        assert_eq!(refl.meta_map().unwrap()["source"], "autonomy_kernel");
    }

    /// Thresholds set on the log are in force for the next decision and pinned.
    #[test]
    fn set_thresholds_writes_a_config_and_the_rule_table() {
        let mut m = Memory::new();
        let set = [(String::from("reflection_interval"), 3)];
        let (th, events) = tick::set_thresholds(&mut m, &set, &[], &clock()).unwrap();
        assert_eq!(
            th.get(crate::event::config::Threshold::ReflectionInterval),
            3
        );
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["config", "autonomy_rule_table"]);
        // Again: already in force and pinned, nothing written.
        let (_, again) = tick::set_thresholds(&mut m, &set, &[], &clock()).unwrap();
        assert!(again.is_empty());
    }
}

/// The thinking tick on the in-memory log: when it asks the model, what the claim and the
/// reply write, and what a failed call or a spent budget leaves.
mod thinking_on_memory {
    use super::*;
    use crate::event::{Clock, Kind, NewEvent};
    use crate::llm::{Adapter, LlmError, Reply, Request};
    use crate::session::{Options, TurnError};
    use crate::store::memory::Memory;
    use crate::store::EventLog;

    /// A model that gives one reply (or fails), counting its calls.
    struct Canned {
        reply: Result<String, String>,
        calls: usize,
    }

    impl Canned {
        fn saying(text: &str) -> Canned {
            Canned {
                reply: Ok(text.into()),
                calls: 0,
            }
        }
    }

    impl Adapter for Canned {
        fn provider(&self) -> &str {
            "canned"
        }
        fn model(&self) -> &str {
            "m"
        }
        fn generate(&mut self, _req: &Request) -> Result<Reply, LlmError> {
            self.calls += 1;
            match &self.reply {
                Ok(text) => Ok(Reply {
                    text: text.clone(),
                    model: "m".into(),
                    in_tokens: Some(10),
                    out_tokens: Some(5),
                    latency_ms: 0,
                    attempts: 1,
                    finish_reason: None,
                }),
                Err(why) => Err(LlmError::Config(why.clone())),
            }
        }
    }

    fn opts() -> Options {
        Options {
            clock: Clock::pinned("2025-11-24T05:55:41.123456Z").unwrap(),
            ..Options::default()
        }
    }

    fn slot(n: i64) -> Slot {
        Slot::new(n, crate::formats::slot::INTERVAL_SECS)
    }

    /// A log whose next tick reflects: a turn's `metrics_turn`, no kernel reflection after
    /// it; the recall of its prompt is the reference's fixed window (no full-text index here).
    fn after_a_turn() -> Memory {
        let mut m = Memory::new();
        let c = opts().clock;
        let put = |m: &mut Memory, kind, content: &str, source: &str| {
            let mut meta = serde_json::Map::new();
            meta.insert("source".into(), source.into());
            let ev = NewEvent::new(kind, content, meta).unwrap();
            crate::session::append(m, &ev, &c).unwrap()
        };
        let fixed = r#"{"limit":7,"strategy":"fixed","type":"retrieval"}"#;
        put(&mut m, Kind::Config, fixed, "test");
        put(&mut m, Kind::MetricsTurn, "{}", "pmm-turn");
        m
    }

    fn kinds(events: &[crate::event::Event]) -> Vec<&str> {
        events.iter().map(|e| e.kind.as_str()).collect()
    }

    /// A decision that does not act never calls the model: today's tick, said why.
    #[test]
    fn a_tick_that_does_not_act_asks_nothing() {
        let mut m = Memory::new();
        let mut model = Canned::saying("COMMIT: never");
        let t = think::run(&mut m, &mut model, &slot(7), &opts()).unwrap();
        assert_eq!(model.calls, 0);
        assert_eq!(t.think["asked"], false);
        assert_eq!(t.think["why"], "the decision does not act");
        let tick::Ticked::Done(done) = &t.ticked else {
            panic!("a tick written: {:?}", t.ticked);
        };
        assert_eq!(done.decision.decision, Action::Idle);
        assert_eq!(m.max_id().unwrap(), done.events.last().unwrap().id);
    }

    /// A reflect asks the model once: the claim (the slot's stimulus, marked as thinking),
    /// then the tick with the reply and what its `COMMIT:` opens, all of the kernel.
    #[test]
    fn a_reflect_asks_the_model_and_applies_its_markers() {
        let mut m = after_a_turn();
        let mut model = Canned::saying("COMMIT: tidy the notes");
        let t = think::run(&mut m, &mut model, &slot(8), &opts()).unwrap();
        assert_eq!(model.calls, 1);
        assert_eq!(t.think["asked"], true);
        assert_eq!(t.think["opened"].as_array().unwrap().len(), 1);
        let tick::Ticked::Done(done) = &t.ticked else {
            panic!("a tick written: {:?}", t.ticked);
        };
        assert_eq!(done.decision.decision, Action::Reflect);
        let k = kinds(&done.events);
        let stimulus = k.iter().position(|k| *k == "autonomy_stimulus").unwrap();
        let reply = k.iter().position(|k| *k == "assistant_message").unwrap();
        let open = k.iter().position(|k| *k == "commitment_open").unwrap();
        assert!(stimulus < reply && reply < open, "{k:?}");
        let claim = done.events[stimulus].meta_map().unwrap();
        assert_eq!(claim["claim"], "think");
        let r = done.events[reply].meta_map().unwrap();
        assert_eq!(r["source"], think::SOURCE.as_str());
        assert_eq!(r["prompt_format"], think::THINK_FORMAT);
        assert_eq!(m.max_id().unwrap(), done.events.last().unwrap().id);
        // The slot is spent: a second tick for it asks nothing and writes nothing.
        let head = m.max_id().unwrap();
        let again = think::run(&mut m, &mut model, &slot(8), &opts()).unwrap();
        assert!(matches!(again.ticked, tick::Ticked::AlreadyTicked { .. }));
        assert_eq!((model.calls, m.max_id().unwrap()), (1, head));
    }

    /// A model that fails leaves the claim and a `generation_failure` naming the slot and
    /// its stimulus; the slot is spent.
    #[test]
    fn a_failed_call_keeps_the_claim_and_records_the_failure() {
        let mut m = after_a_turn();
        let mut model = Canned {
            reply: Err("no model here".into()),
            calls: 0,
        };
        let err = think::run(&mut m, &mut model, &slot(9), &opts()).unwrap_err();
        let TurnError::Generation {
            events, failure, ..
        } = err
        else {
            panic!("a generation failure: {err}");
        };
        assert_eq!(failure.kind, Kind::GenerationFailure);
        assert_eq!(m.max_id().unwrap(), failure.id);
        let stimulus = events
            .iter()
            .find(|e| e.kind == Kind::AutonomyStimulus)
            .unwrap();
        assert_eq!(failure.meta_map().unwrap()["about_event"], stimulus.id);
        assert!(failure.content.contains("slot 9"), "{}", failure.content);
        let again = think::run(&mut m, &mut model, &slot(9), &opts()).unwrap();
        assert!(matches!(again.ticked, tick::Ticked::AlreadyTicked { .. }));
        assert_eq!(model.calls, 1);
    }

    /// With the day's calls spent, a tick that would act is today's tick, not asked, with
    /// the budget's reason in its `meta.think`.
    #[test]
    fn a_spent_budget_stops_the_asking() {
        let mut m = after_a_turn();
        let mut meta = serde_json::Map::new();
        meta.insert("source".into(), "pmm-tick".into());
        let budget = r#"{"think_calls_per_day":1,"type":"autonomy_thresholds"}"#;
        let ev = NewEvent::new(Kind::Config, budget, meta).unwrap();
        crate::session::append(&mut m, &ev, &opts().clock).unwrap();
        let mut model = Canned::saying("REFLECT:{\"note\":\"x\"}");
        let first = think::run(&mut m, &mut model, &slot(10), &opts()).unwrap();
        assert_eq!(first.think["asked"], true);
        // Another turn, so that the next slot would reflect again.
        let mut meta = serde_json::Map::new();
        meta.insert("source".into(), "pmm-turn".into());
        let turn = NewEvent::new(Kind::MetricsTurn, "{}", meta).unwrap();
        crate::session::append(&mut m, &turn, &opts().clock).unwrap();
        let second = think::run(&mut m, &mut model, &slot(11), &opts()).unwrap();
        assert_eq!(model.calls, 1);
        assert_eq!(second.think["asked"], false);
        let why = second.think["why"].as_str().unwrap();
        assert!(
            why.starts_with("think budget spent: 1 model calls"),
            "{why}"
        );
    }
}
