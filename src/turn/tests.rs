//! The turn's stages on the in-memory log ([`crate::store::memory`]): no file, no database.

use super::*;
use crate::event::NewEvent;
use crate::llm::{LlmError, Reply, Request};
use crate::store::memory::Memory;
use crate::store::EventLog;

const TS: &str = "2025-11-24T05:55:41.123456Z";

/// A model that gives one reply, or fails.
struct Canned(Result<String, String>);

impl Adapter for Canned {
    fn provider(&self) -> &str {
        "canned"
    }
    fn model(&self) -> &str {
        "m"
    }
    fn generate(&mut self, _req: &Request) -> Result<Reply, LlmError> {
        match &self.0 {
            Ok(text) => Ok(Reply {
                text: text.clone(),
                model: "m".into(),
                in_tokens: None,
                out_tokens: None,
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
        clock: Clock::pinned(TS).unwrap(),
        ..Options::default()
    }
}

/// A log whose retrieval is the reference's fixed window (the in-memory log keeps no
/// full-text index for whole-ledger recall).
fn log() -> Memory {
    let mut m = Memory::new();
    let mut meta = Map::new();
    meta.insert("source".into(), "test".into());
    let config = NewEvent::new(
        Kind::Config,
        r#"{"limit":7,"strategy":"fixed","type":"retrieval"}"#,
        meta,
    )
    .unwrap();
    crate::session::append(&mut m, &config, &opts().clock).unwrap();
    m
}

fn kinds(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

/// Stage 1 on a ledger's first turn: the default policy, then the user's message, in one
/// transaction.
#[test]
fn the_first_turn_records_the_policy_and_the_message() {
    let mut m = log();
    let mut events = Vec::new();
    let (p, user, _) = record_user(&mut m, "hello there", &opts().clock, &mut events).unwrap();
    assert_eq!(kinds(&events), ["config", "user_message"]);
    assert_eq!(events[0].content, DEFAULT_POLICY);
    assert_eq!(user.content, "hello there");
    assert_eq!(p.mirror.last_event_id, user.id, "the projections saw it");
    assert_eq!(m.max_id().unwrap(), 3);
}

/// A whole turn with a model that opens a commitment and makes a claim: the reply, what its
/// markers cause and the turn's records, in order, chained after the message.
#[test]
fn a_turn_writes_the_reply_and_what_its_markers_cause() {
    let mut m = log();
    let reply = "Noted.\nCOMMIT: write the report\nCLAIM:event_existence={\"id\":1}";
    let done = run(
        &mut m,
        &mut Canned(Ok(reply.into())),
        "please help",
        &opts(),
    )
    .unwrap();
    assert_eq!(done.reply, reply);
    assert_eq!(done.opened.len(), 1);
    assert_eq!(done.valid_claims.len(), 1, "{:?}", done.failed_claims);
    let k = kinds(&done.events);
    assert_eq!(k[..3], ["config", "user_message", "assistant_message"]);
    for want in [
        "claim",
        "commitment_open",
        "retrieval_selection",
        "metrics_turn",
    ] {
        assert!(k.contains(&want), "{want} in {k:?}");
    }
    let open = done.events.iter().find(|e| e.kind == Kind::CommitmentOpen);
    assert!(open.unwrap().content.contains("write the report"));
    // Everything the turn returned is in the log, as returned, ids rising by one.
    for (i, e) in done.events.iter().enumerate() {
        assert_eq!(e.id, done.events[0].id + i as i64);
        assert_eq!(m.get(e.id).unwrap().as_ref(), Some(e));
    }
    assert_eq!(m.max_id().unwrap(), done.events.last().unwrap().id);
}

/// A model that fails: the message stays, and a `generation_failure` names it.
#[test]
fn a_failed_call_records_a_generation_failure() {
    let mut m = log();
    let err = run(&mut m, &mut Canned(Err("no model".into())), "hi", &opts()).unwrap_err();
    let TurnError::Generation {
        events, failure, ..
    } = err
    else {
        panic!("a generation error: {err:?}");
    };
    assert_eq!(
        kinds(&events),
        ["config", "user_message", "generation_failure"]
    );
    assert_eq!(failure.content, "generation failed: no model");
    let about = failure.meta_map().unwrap()["about_event"].as_i64();
    assert_eq!(about, Some(events[1].id));
}

/// A write the policy forbids inside the last stage rolls the whole stage back and records a
/// `violation` in its place.
#[test]
fn a_forbidden_write_rolls_the_stage_back_and_records_a_violation() {
    let mut m = log();
    // The turn's `retrieval_selection` carries no source: its actor is `unknown`.
    let strict = r#"{"forbid_sources":{"unknown":["retrieval_selection"]},"type":"policy"}"#;
    let mut meta = Map::new();
    meta.insert("source".into(), "test".into());
    let policy = NewEvent::new(Kind::Config, strict, meta).unwrap();
    crate::session::append(&mut m, &policy, &opts().clock).unwrap();
    let before = m.max_id().unwrap();
    let reply = "COMMIT: something";
    let err = run(&mut m, &mut Canned(Ok(reply.into())), "hi", &opts()).unwrap_err();
    assert!(
        matches!(err, TurnError::Store(crate::Error::PolicyViolation { .. })),
        "{err:?}"
    );
    let after: Vec<Event> = (before + 1..=m.max_id().unwrap())
        .map(|id| m.get(id).unwrap().unwrap())
        .collect();
    assert_eq!(
        kinds(&after),
        ["user_message", "violation"],
        "the reply's write is gone"
    );
}
