//! Thinking ticks (docs/autonomy.md, "Thinking ticks"): a tick whose decision acts (a
//! reflection, a commitment review) asks the model what to do, and the reply's markers
//! (`COMMIT`, `CLOSE`, `CLAIM`, `REFLECT`) are applied by the turn's own rules.
//!
//! The kernel alone decides *when*; the model decides *what*. The model is never called with
//! the write lock held:
//!
//! 1. A read of the head: the slot's stimulus (already ticked: nothing, no call), the
//!    decision (not acting: today's tick), the day's budget (spent: today's tick, with why in
//!    the `autonomy_tick`'s `meta.think`).
//! 2. **The claim**, a write transaction of its own: the slot's `autonomy_stimulus` (and a new
//!    ledger's default configs). A second tick for the slot (cron overlap, another host) sees
//!    it and writes nothing, without calling the model: at most one call per slot.
//! 3. The prompt (read snapshot) and the model call, outside any transaction.
//! 4. A write transaction against the true head: the slot is still this claim's, the decision
//!    is taken again (a turn may have come in), then the tick's events with the reply, what its
//!    markers do, and the kernel's reflection, as [`super::tick`] writes them.
//!
//! A model that fails (an error status, a dropped connection, a stall past the timeout, an
//! interrupt) leaves the claim's stimulus and a `generation_failure` naming the slot (exit 3):
//! the slot is spent, and the next slot decides afresh (the same decision, when nothing
//! changed). A process that dies between the claim and its last write leaves the stimulus
//! alone: that slot is never ticked again (as a slot nobody ticked), and the next one decides
//! afresh. Nothing else of the tick is ever half-written.

use super::tick::{self, Mode, Ticked};
use super::{decide, goals, Action, Decision, Slot, View};
use crate::context::embed::py_split;
use crate::context::prompt::HISTORY_MESSAGES;
use crate::context::select::{self, Depth, RetrievalConfig, Via};
use crate::event::{Clock, Event, Kind, Source};
use crate::llm::{Adapter, LlmError, Reply, Request};
use crate::marker;
use crate::projection::checkpoint;
use crate::projection::state::Projections;
use crate::session::{self, catch_up, ensure_defaults, Options, Session, TurnError};
use crate::store::log::{Ending, SessionTxn, SessionWriter};
use crate::store::{self, Filter, Indexes};
use serde_json::{json, Value};

/// `meta.source` of everything a thinking tick writes on the model's behalf.
pub const SOURCE: Source = Source::AutonomyKernel;

/// `meta.prompt_format` of a thinking tick's reply (a turn's is [`crate::context::prompt::PROMPT_FORMAT`]):
/// `think.2` records what recall selected (`meta.selected`, `meta.via`), which [`rebuild`]
/// renders again; `think.1` did not, and is rebuilt by running recall again.
pub const THINK_FORMAT: &str = "think.2";

/// The thinking prompt formats [`rebuild`] takes.
pub const THINK_FORMATS: [&str; 2] = ["think.1", THINK_FORMAT];

/// The budget keys `pmm-tick --set` takes beside the thresholds.
pub const BUDGET_KEYS: [&str; 2] = ["think_calls_per_day", "think_tokens_per_day"];

/// Model calls a day when no budget was set.
pub const DEFAULT_CALLS_PER_DAY: i64 = 48;

/// Tokens (prompt and reply) a day when no budget was set.
pub const DEFAULT_TOKENS_PER_DAY: i64 = 200_000;

/// The most characters of a reflection the prompt quotes.
const REFLECTION_CHARS: usize = 400;

/// How many of the newest reflections the prompt quotes.
const REFLECTIONS: usize = 3;

/// Characters of recalled evidence when the retrieval config says nothing else.
const RECALL_BUDGET: usize = 4_000;

/// The daily budget in force: the newest `autonomy_thresholds` config that names each key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Model calls a UTC day.
    pub calls_per_day: i64,
    /// Tokens a UTC day.
    pub tokens_per_day: i64,
}

/// What thinking spent on one UTC day, and the kernel's replies so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    /// Model calls (replies and failures).
    pub calls: i64,
    /// Tokens of the replies.
    pub tokens: i64,
    /// Thinking replies in the whole ledger (the scripted adapter's line is this + 1).
    pub replies: u64,
}

/// The budget in force on the ledger whose projections are `p`: the newest
/// `autonomy_thresholds` config that names each key (the autonomy fold keeps them).
pub fn budget(p: &Projections) -> Budget {
    let log = &p.autonomy.think;
    Budget {
        calls_per_day: log.calls_per_day.unwrap_or(DEFAULT_CALLS_PER_DAY),
        tokens_per_day: log.tokens_per_day.unwrap_or(DEFAULT_TOKENS_PER_DAY),
    }
}

/// A thinking tick's prompt rebuilt from the ledger alone, for the reply `reply` (`None`
/// when it is not a thinking tick's reply): the decision taken again from the events before
/// its slot's stimulus, the prompt from those up to the stimulus and the selection the reply
/// records. With its recorded `prompt_sha256` and `prompt_format`.
pub fn rebuild<R: Indexes>(
    r: &R,
    reply: &Event,
) -> crate::Result<Option<(crate::context::prompt::Prompt, String)>> {
    let m = reply.meta_map().unwrap_or_default();
    let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
    let (Some(format), Some(slot_id), Some(recorded)) =
        (s("prompt_format"), s("slot_id"), s("prompt_sha256"))
    else {
        return Ok(None);
    };
    if !THINK_FORMATS.contains(&format.as_str()) {
        return Ok(None);
    }
    if reply.kind != Kind::AssistantMessage || s("source").as_deref() != Some(SOURCE.as_str()) {
        return Ok(None);
    }
    let n = |k: &str| m.get(k).and_then(Value::as_i64);
    let slot = Slot::new(
        n("slot").unwrap_or_default(),
        n("interval").unwrap_or(super::slot::INTERVAL_SECS),
    );
    let Some(stimulus) = stimulus_before(r, reply.id, &slot_id)? else {
        return Ok(None);
    };
    let mut p = checkpoint::project(r, Some(stimulus.id - 1), true)?.projections;
    let decision = decide(&View::of(&p), &p.mirror.thresholds);
    p.apply(&stimulus);
    // think.1 recorded no selection: recall runs again.
    let sel = match format.as_str() {
        "think.1" => None,
        _ => match recorded_selection(r, &m)? {
            Some(sel) => Some(sel),
            None => return Ok(None),
        },
    };
    // think.1 prompts ran recall at its full depth; the selection of a think.2 prompt is
    // recorded, and rendered as it is.
    let asked = prompt(
        r,
        &p,
        &slot,
        &decision,
        &Options::default(),
        sel,
        Depth::FULL,
    )?;
    let q = asked.request;
    Ok(Some((
        crate::context::prompt::Prompt {
            system: q.system,
            history: q.history,
            user: q.user,
        },
        recorded,
    )))
}

/// The newest `autonomy_stimulus` before event `before` whose content names `slot_id` (the
/// slot's stimulus, the claim, written just before the reply): read newest first, in pages,
/// so that `--deep`, which rebuilds every thinking prompt, does not read every stimulus of
/// the ledger for each one.
fn stimulus_before<R: Indexes>(r: &R, before: i64, slot_id: &str) -> crate::Result<Option<Event>> {
    const PAGE: usize = 64;
    let mut filter = Filter {
        until: Some(before - 1),
        kinds: vec![Kind::AutonomyStimulus],
        ..Filter::default()
    };
    loop {
        let page = r.tail(&filter, PAGE)?;
        if let Some(e) = page.iter().rev().find(|e| e.content.contains(slot_id)) {
            return Ok(Some(e.clone()));
        }
        match page.first() {
            Some(oldest) if page.len() == PAGE => filter.until = Some(oldest.id - 1),
            _ => return Ok(None),
        }
    }
}

/// What thinking spent on the UTC day of `clock` (`YYYY-MM-DD`, from the events' `ts`), by
/// the ledger whose projections are `p`: calls claimed (in flight or answered), tokens
/// replied.
pub fn spent(p: &Projections, clock: &Clock) -> Spent {
    let day = clock.now().format("%Y-%m-%d").to_string();
    let log = &p.autonomy.think;
    let d = log.days.get(&day).copied().unwrap_or_default();
    Spent {
        calls: d.calls(),
        tokens: d.tokens,
        replies: log.replies,
    }
}

/// Why the budget stops thinking today, if it does.
fn over_budget(b: &Budget, s: &Spent) -> Option<String> {
    if s.calls >= b.calls_per_day {
        return Some(format!(
            "think budget spent: {} model calls today (think_calls_per_day {})",
            s.calls, b.calls_per_day
        ));
    }
    if s.tokens >= b.tokens_per_day {
        return Some(format!(
            "think budget spent: {} tokens today (think_tokens_per_day {})",
            s.tokens, b.tokens_per_day
        ));
    }
    None
}

/// What a thinking tick did.
#[derive(Debug, Clone)]
pub struct Thought {
    /// The tick (its events include the reply's).
    pub ticked: Ticked,
    /// `{"asked":bool, …}`: whether the model was asked, and what came of it or why not.
    pub think: Value,
}

impl Thought {
    /// The `{"type":"tick",…}` record, with `"think"`.
    pub fn record(&self) -> Value {
        let mut r = self.ticked.record();
        r["think"] = self.think.clone();
        r
    }
}

/// A tick of `slot` that asks `adapter` when its decision acts. Without acting, or with the
/// day's budget spent, it is [`tick::run`] (the budget's reason in the tick's meta).
pub fn run<W: SessionWriter>(
    w: &mut W,
    adapter: &mut dyn Adapter,
    slot: &Slot,
    opts: &Options,
) -> Result<Thought, TurnError> {
    match run_inner(w, adapter, slot, opts) {
        Err(TurnError::Store(e)) => {
            Err(TurnError::Store(session::record_refusal(w, e, &opts.clock)))
        }
        other => other,
    }
}

/// Whether a tick with `decision` on projections `p` asks the model: a reflect (a
/// commitment review among them), or a goal that stays open to work ([`goals::to_work`]).
pub fn acts(decision: &super::Decision, p: &Projections) -> bool {
    decision.decision == Action::Reflect || goals::to_work(&p.mirror).is_some()
}

/// A tick given a model that does not ask it: today's tick, with `note` as its `meta.think`,
/// in which the kernel may open a goal that stays open.
fn unasked<W: SessionWriter>(
    w: &mut W,
    slot: &Slot,
    clock: &Clock,
    note: Option<&str>,
) -> crate::Result<Ticked> {
    tick::run_noted(w, slot, clock, note, true)
}

fn plain(ticked: Ticked, why: &str) -> Thought {
    Thought {
        ticked,
        think: json!({"asked": false, "why": why}),
    }
}

fn run_inner<W: SessionWriter>(
    w: &mut W,
    adapter: &mut dyn Adapter,
    slot: &Slot,
    opts: &Options,
) -> Result<Thought, TurnError> {
    let clock = &opts.clock;
    let rows_at_start = store::rows_read();
    let (mut p, claim, decision) = match decide_and_claim(w, adapter, slot, clock)? {
        Ok(claimed) => claimed,
        Err(not_asked) => return Ok(not_asked),
    };
    // The claim's stimulus (the slot's retention erasures may follow it).
    let stimulus = claim
        .iter()
        .rfind(|e| e.kind == Kind::AutonomyStimulus)
        .map_or(0, |e| e.id);

    // 3. The prompt and the call, outside any transaction.
    let request =
        w.in_snapshot(&mut |r| prompt(r, &p, slot, &decision, opts, None, Depth::LIGHT))?;
    let reply = match adapter.generate_with(&request.request, None, opts.cancel.as_ref()) {
        Ok(r) => r,
        Err(error) => {
            let failure = record_failure(w, &*adapter, &mut p, slot, stimulus, &error, clock)?;
            let mut events = claim;
            events.push(failure.clone());
            return Err(TurnError::Generation {
                error,
                events,
                failure: Box::new(failure),
            });
        }
    };
    let answer = Answer {
        provider: adapter.provider().to_string(),
        request: &request,
        reply: &reply,
    };
    let (decision, events, think) = write_thought(w, p, slot, stimulus, &answer, opts)?;
    let mut all = claim;
    all.extend(events);
    Ok(Thought {
        ticked: Ticked::Done(tick::TickDone {
            slot: slot.clone(),
            decision,
            events: all,
            rows_read: store::rows_read() - rows_at_start,
        }),
        think,
    })
}

/// Steps 1 and 2: the decision under a read of the head, then the claim, committed before
/// the call. `Err` is the tick that asks nothing (the slot already ticked, a decision that
/// does not act, the budget spent); `Ok` the projections, the claim's events and the decision.
#[allow(clippy::type_complexity)]
fn decide_and_claim<W: SessionWriter>(
    w: &mut W,
    adapter: &mut dyn Adapter,
    slot: &Slot,
    clock: &Clock,
) -> crate::Result<Result<(Projections, Vec<Event>, Decision), Thought>> {
    let already = |stimulus| {
        let t = Ticked::AlreadyTicked {
            slot: slot.clone(),
            stimulus,
        };
        plain(t, "the slot already has a stimulus")
    };
    let p = checkpoint::project(&*w, None, true)?.projections;
    if let Some(stimulus) = tick::stimulus_for(&*w, &p, slot)? {
        return Ok(Err(already(stimulus)));
    }
    let decision = decide(&View::of(&p), &p.mirror.thresholds);
    if !acts(&decision, &p) {
        let t = unasked(w, slot, clock, None)?;
        return Ok(Err(plain(t, "the decision does not act")));
    }
    if let Some(why) = over_budget(&budget(&p), &spent(&p, clock)) {
        let t = unasked(w, slot, clock, Some(&why))?;
        return Ok(Err(plain(t, &why)));
    }
    // A model that cannot be asked at all (refused connection, unknown model): exit 3 before
    // anything is written.
    adapter.preflight().map_err(crate::Error::from)?;
    // The claim: step 1's projections, caught up (the checkpoint is loaded once a tick).
    Ok(match claim(w, p, slot, clock)? {
        Claimed::Already(stimulus) => Err(already(stimulus)),
        Claimed::NotActing => {
            let t = unasked(w, slot, clock, None)?;
            Err(plain(t, "the decision does not act"))
        }
        Claimed::OverBudget(why) => {
            let t = unasked(w, slot, clock, Some(&why))?;
            Err(plain(t, &why))
        }
        Claimed::Mine(p, events, decision) => Ok((*p, events, decision)),
    })
}

/// What the model was asked and said, for the write.
struct Answer<'a> {
    provider: String,
    request: &'a Asked,
    reply: &'a Reply,
}

/// Step 4, against the true head: the slot still this claim's, the decision taken again (a
/// turn may have come in), then the tick's events with the reply, what its markers do and
/// the goal it worked. The decision, the events written and the `think` record.
fn write_thought<W: SessionWriter>(
    w: &mut W,
    p: Projections,
    slot: &Slot,
    stimulus: i64,
    answer: &Answer<'_>,
    opts: &Options,
) -> crate::Result<(Decision, Vec<Event>, Value)> {
    let mut first = Some(p);
    w.session(&mut |tx| {
        // `session` runs this once: the projections move in.
        let p = first.take().unwrap_or_default();
        thought_in(tx, p, slot, stimulus, answer, opts)
    })
}

/// [`write_thought`] inside its write transaction.
fn thought_in(
    tx: &mut dyn SessionTxn,
    mut p: Projections,
    slot: &Slot,
    stimulus: i64,
    answer: &Answer<'_>,
    opts: &Options,
) -> crate::Result<(Decision, Vec<Event>, Value)> {
    let (provider, reply) = (&answer.provider, answer.reply);
    let mut events = Vec::new();
    catch_up(&*tx, &mut p)?;
    if tick::stimulus_for(&*tx, &p, slot)? != Some(stimulus) {
        // Never seen: the claim is this process's and the ledger only grows.
        return Err(crate::Error::bad_input(
            None,
            format!("slot {}: its stimulus is not event {stimulus}", slot.slot),
        ));
    }
    let th = p.mirror.thresholds.clone();
    let decision = decide(&View::of(&p), &th);
    let goal = goals::to_work(&p.mirror).map(|c| c.cid.clone());
    let mut done = Done::default();
    let mut s = Session {
        tx,
        p: &mut p,
        events: &mut events,
        clock: &opts.clock,
    };
    let note = json!(format!("asked {provider} ({})", reply.model));
    let mode = Mode {
        note: Some(&note),
        open_goals: true,
    };
    tick::append_tick(&mut s, slot, &th, &decision, mode, &mut |s| {
        done = append_reply(s, slot, provider, answer.request, reply, opts)?;
        match &goal {
            Some(cid) => goals::close_worked(s, cid, done.reply, &reply.text),
            None => Ok(()),
        }
    })?;
    tick::test_pause();
    let think = json!({
        "asked": true,
        "provider": provider,
        "model": reply.model,
        "reply": reply.text,
        "opened": done.opened,
        "closed": done.closed,
        "claims": done.claims,
        "goal": goal,
        "prompt_sha256": answer.request.sha256,
    });
    let mut think = think;
    if !done.ignored.is_empty() {
        // Said, as a turn says it: markers past the limit were not acted on.
        think["markers_ignored"] = json!(done.ignored);
    }
    Ok((decision, events, think))
}

/// The claim's result.
enum Claimed {
    /// Another tick stimulated the slot first: its stimulus.
    Already(i64),
    /// The decision taken against the true head does not act (a turn came in): nothing was
    /// written.
    NotActing,
    /// The day's budget, counted against the true head (calls claimed by other slots' ticks
    /// in flight included), is spent: why; nothing was written.
    OverBudget(String),
    /// This one did: the projections after it, what it wrote, and the decision the prompt is
    /// about (taken against the head just before the stimulus, so that [`rebuild`] takes it
    /// again from the ledger).
    Mine(Box<Projections>, Vec<Event>, super::Decision),
}

/// Step 2: the default configs of a new ledger and the slot's stimulus, marked as a thinking
/// claim (`meta.claim` `"think"`: the call is counted against the day's budget from now on),
/// in one transaction, unless the slot has its stimulus already, the decision no longer acts,
/// or the budget, checked again against the true head, is spent. `p`: projections of the
/// ledger as it was read before, caught up here.
fn claim<W: SessionWriter>(
    w: &mut W,
    p: Projections,
    slot: &Slot,
    clock: &Clock,
) -> crate::Result<Claimed> {
    let mut first = Some(p);
    let claimed = w.session_ending(&mut |tx| {
        // `session_ending` runs this once: the projections move in.
        claim_in(tx, first.take().unwrap_or_default(), slot, clock)
    })?;
    if let Claimed::Mine(_, events, _) = &claimed {
        if events.iter().any(|e| e.kind == Kind::Erasure) {
            // The erased texts may sit beside the database (SQLite: the WAL's frames).
            w.forget_erased_bytes()?;
        }
    }
    Ok(claimed)
}

/// [`claim`] inside its write transaction: committed when the slot is this tick's, rolled
/// back (the defaults of a new ledger with it) when it is not.
fn claim_in(
    tx: &mut dyn SessionTxn,
    mut p: Projections,
    slot: &Slot,
    clock: &Clock,
) -> crate::Result<Ending<Claimed>> {
    let mut events = Vec::new();
    catch_up(&*tx, &mut p)?;
    if let Some(stimulus) = tick::stimulus_for(&*tx, &p, slot)? {
        return Ok(Ending::RollBack(Claimed::Already(stimulus)));
    }
    ensure_defaults(tx, &mut p, &mut events, clock)?;
    let decision = decide(&View::of(&p), &p.mirror.thresholds);
    if !acts(&decision, &p) {
        return Ok(Ending::RollBack(Claimed::NotActing));
    }
    if let Some(why) = over_budget(&budget(&p), &spent(&p, clock)) {
        return Ok(Ending::RollBack(Claimed::OverBudget(why)));
    }
    tick::append_stimulus_with(
        &mut Session {
            tx: &mut *tx,
            p: &mut p,
            events: &mut events,
            clock,
        },
        slot,
        &[("claim", "think".into())],
    )?;
    // The slot's retention pass goes with its claim, so that the prompt is built after it
    // (the model is never sent what the policy says is gone) and a failed call still leaves
    // the pass done. `p` is caught up past its erasures by the write, as by any reader.
    let first = events.first().map_or(i64::MAX, |e| e.id);
    let erased = super::retention::apply(tx, first, slot, clock)?;
    events.extend(erased);
    Ok(Ending::Commit(Claimed::Mine(Box::new(p), events, decision)))
}

/// What the model is asked, the prompt's digest, and what recall selected for it (recorded
/// with the reply as `meta.selected` and `meta.via`, so that [`rebuild`] renders the same
/// evidence: recall reads derived indexes that other processes fill in meanwhile).
struct Asked {
    request: Request,
    sha256: String,
    selected: Vec<i64>,
    via: Vec<Vec<Via>>,
}

/// The selection a thinking reply recorded (`meta.selected`, `meta.via`), its events read
/// from `r`; `None` when it records none or names an event `r` lacks.
fn recorded_selection<R: Indexes>(
    r: &R,
    m: &serde_json::Map<String, Value>,
) -> crate::Result<Option<select::Selection>> {
    let Some(selected) = m
        .get("selected")
        .and_then(|v| serde_json::from_value::<Vec<i64>>(v.clone()).ok())
    else {
        return Ok(None);
    };
    let via = m
        .get("via")
        .and_then(|v| serde_json::from_value::<Vec<Vec<Via>>>(v.clone()).ok())
        .unwrap_or_default();
    let mut events = Vec::with_capacity(selected.len());
    for &id in &selected {
        match r.get_shared(id)? {
            Some(e) => events.push(e),
            None => return Ok(None),
        }
    }
    events.sort_by_key(|e| e.id);
    Ok(Some(select::Selection {
        scores: vec![0.0; selected.len()],
        selected,
        events,
        via,
    }))
}

/// Step 3's prompt: the turn's system prompt (identity, self-model, open commitments,
/// internal goals, recalled evidence for the open commitments within the retrieval budget,
/// looking at `depth` of the ledger unless `recorded` gives the selection)
/// and the recent conversation, with a message that says what the tick is for: the
/// commitments with their age, the newest reflections, and what the reply may do.
fn prompt<R: Indexes>(
    r: &R,
    p: &Projections,
    slot: &Slot,
    decision: &super::Decision,
    opts: &Options,
    recorded: Option<select::Selection>,
    depth: Depth,
) -> crate::Result<Asked> {
    let replies = p.autonomy.think.replies;
    let head = p.mirror.last_event_id;
    let open = p.mirror.open_in_order();
    let msg = tick_message(r, p, slot, decision)?;
    let query: Vec<&str> = open.iter().map(|c| c.text.as_str()).collect();
    let query = if query.is_empty() {
        msg.clone()
    } else {
        query.join("\n")
    };
    let cfg = RetrievalConfig::from_config(p.mirror.retrieval.as_ref());
    let next = head + 1;
    let history = select::history(
        r,
        next,
        HISTORY_MESSAGES,
        crate::context::prompt::HISTORY_CHARS,
    )?;
    let exclude = history.iter().map(|e| e.id).collect();
    let budget = opts.budget.unwrap_or_else(|| cfg.budget.min(RECALL_BUDGET));
    let sel = match recorded {
        Some(sel) => sel,
        None => select::select_hybrid_at(r, p, &query, next, budget, exclude, &mut || None, depth)?,
    };
    let sent = crate::context::prompt::render(p, &sel, &msg, &history);
    let sha256 = sent.sha256();
    Ok(Asked {
        selected: sel.selected,
        via: sel.via,
        request: Request {
            system: sent.system,
            user: sent.user,
            history: sent.history,
            temperature: opts.temperature,
            top_p: opts.top_p,
            seed: opts.seed,
            max_tokens: opts.max_tokens,
            turn: replies + 1,
        },
        sha256,
    })
}

/// The thinking tick's message: the slot and the kernel's decision, the open commitments
/// with their age, the latest reflections, the goal to work, and the marker rules.
fn tick_message<R: Indexes>(
    r: &R,
    p: &Projections,
    slot: &Slot,
    decision: &Decision,
) -> crate::Result<String> {
    let head = p.mirror.last_event_id;
    let open = p.mirror.open_in_order();
    let mut msg = format!(
        "[autonomy tick, slot {}] No user is present: this is a scheduled moment to work on \
         your own commitments and goals.\nThe kernel decided: {} ({}).\n",
        slot.slot,
        decision.decision.as_str(),
        decision.reasoning
    );
    if open.is_empty() {
        msg.push_str("Open commitments: none.\n");
    } else {
        msg.push_str("Open commitments (oldest first):\n");
        for c in &open {
            msg.push_str(&format!(
                "- {}: {} (opened at event {}, {} events ago)\n",
                c.cid,
                c.text,
                c.opened_at,
                head - c.opened_at
            ));
        }
    }
    // Bounded by the head, so that the prompt is rebuilt from the ledger as it was.
    let reflections = r.tail(
        &Filter {
            until: Some(head),
            kinds: vec![Kind::Reflection],
            ..Filter::default()
        },
        REFLECTIONS,
    )?;
    if !reflections.is_empty() {
        msg.push_str("Latest reflections (newest first):\n");
        for e in reflections.iter().rev() {
            let text: String = e.content.chars().take(REFLECTION_CHARS).collect();
            msg.push_str(&format!("- event {}: {}\n", e.id, text));
        }
    }
    if let Some(g) = goals::to_work(&p.mirror) {
        msg.push_str(&goal_task(g));
    }
    msg.push_str(
        "Reply in a few lines. One marker per line: COMMIT: <text> to take on something \
         new, CLOSE: <cid> for a commitment that is done, CLAIM:<type>=<json> for a fact, \
         REFLECT:<json> for what you learned. Say nothing else if there is nothing to do.",
    );
    Ok(msg)
}

/// The message's lines about the goal the tick works.
fn goal_task(g: &crate::projection::mirror::Commitment) -> String {
    let task = match g.text.as_str() {
        goals::EXPLORE => "explore a new idea of your own; take it on with COMMIT: if it is worth it",
        goals::REVIEW => "decide about the stalled commitment: CLOSE: it if it is done or no longer wanted, or say its next step",
        _ => "work it",
    };
    format!(
        "Your goal for this tick: {} {} ({}): {task}. Your reply's first line is recorded as its outcome.\n",
        g.cid,
        g.text,
        g.cause.as_deref().unwrap_or_default(),
    )
}

/// The tokens of a thinking call for `texts`: what the ledger records, and what the day's
/// budget is charged. Recorded: the server's count (at most `i64::MAX`, so the ledger stays
/// readable), else the texts' words, as ever. Charged: the same, unless the server's count is
/// implausible — the budget must not trust a server that reports 0 tokens for a long prompt
/// (it would never be spent): a count below one token per [`MAX_BYTES_PER_TOKEN`] bytes is
/// charged as the words (or that floor) instead.
fn counted(reported: Option<u64>, texts: &[&str]) -> (u64, u64) {
    let words: u64 = texts.iter().map(|t| py_split(t).count() as u64).sum();
    let bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
    let floor = bytes / MAX_BYTES_PER_TOKEN;
    let estimate = words.max(floor);
    match reported {
        Some(n) if n >= floor && (n > 0 || bytes == 0) => {
            let n = n.min(i64::MAX as u64);
            (n, n)
        }
        Some(n) => (n.min(i64::MAX as u64), estimate),
        None => (words, estimate),
    }
}

/// The meta key of a thinking reply whose server reported implausible token counts: the
/// tokens the day's budget is charged instead of `in_tokens` + `out_tokens`.
pub const CHARGED: &str = "tokens_charged";

/// The most bytes one token of a tokenizer in use covers on average over a prompt (English
/// averages about 4, code and other scripts fewer): a server that reports fewer tokens than
/// this allows is not believed.
const MAX_BYTES_PER_TOKEN: u64 = 16;

/// What the reply's markers did.
#[derive(Debug, Default)]
struct Done {
    reply: i64,
    opened: Vec<String>,
    closed: Vec<String>,
    claims: Vec<Value>,
    /// Markers past [`marker::MAX_MARKERS`] of their kind, not acted on.
    ignored: marker::Ignored,
}

/// The reply as a turn records one (provider, model, token counts, `prompt_sha256`; source
/// [`SOURCE`], the slot instead of `reply_to`), then its markers by the turn's rules: claims,
/// commitments opened and closed, the delta reflection with its `REFLECT:`.
fn append_reply(
    s: &mut Session<'_, '_>,
    slot: &Slot,
    provider: &str,
    asked: &Asked,
    reply: &Reply,
    opts: &Options,
) -> crate::Result<Done> {
    let req = &asked.request;
    let prompt = [req.system.as_str(), req.user.as_str()];
    let (in_tokens, in_charged) = counted(reply.in_tokens, &prompt);
    let (out_tokens, out_charged) = counted(reply.out_tokens, &[reply.text.as_str()]);
    let mut m = tick::slot_meta(
        slot,
        &[
            ("role", "assistant".into()),
            ("provider", provider.into()),
            ("model", reply.model.clone().into()),
            ("temperature", json!(opts.temperature)),
            ("top_p", json!(opts.top_p)),
            ("seed", opts.seed.map_or(Value::Null, Value::from)),
            ("prompt_sha256", asked.sha256.clone().into()),
            ("prompt_format", THINK_FORMAT.into()),
            ("selected", json!(asked.selected)),
            ("via", json!(asked.via)),
            ("in_tokens", in_tokens.into()),
            ("out_tokens", out_tokens.into()),
            ("lat_ms", reply.latency_ms.into()),
            ("slot", slot.slot.into()),
            ("slot_id", slot.slot_id.clone().into()),
            ("source", SOURCE.into()),
        ],
    );
    if let Some(n) = opts.max_tokens {
        m.insert("max_tokens".into(), n.into());
    }
    let charged = in_charged.saturating_add(out_charged);
    if charged != in_tokens.saturating_add(out_tokens) {
        // The server's counts are kept as it gave them; the budget is charged this.
        m.insert(CHARGED.into(), charged.min(i64::MAX as u64).into());
    }
    if let Some(why) = &reply.finish_reason {
        m.insert("finish_reason".into(), why.as_str().into());
    }
    let assistant = s.put(Kind::AssistantMessage, reply.text.as_str(), m)?;
    let (markers, _echoed) = marker::parse_unechoed(&reply.text, &req.system);
    let (claims, failed) = session::append_claims(s, &markers)?;
    let opened = session::append_opens(s, &markers, &[], SOURCE.as_str())?;
    let closed = session::append_closes(s, &markers, SOURCE.as_str())?;
    session::append_delta_reflection(s, &markers, &failed, &opened, &closed, assistant.id)?;
    Ok(Done {
        ignored: markers.ignored,
        reply: assistant.id,
        opened,
        closed,
        claims,
    })
}

/// A failed call: a `generation_failure` naming the slot and its stimulus, in a transaction of
/// its own.
fn record_failure<W: SessionWriter>(
    w: &mut W,
    adapter: &dyn Adapter,
    p: &mut Projections,
    slot: &Slot,
    stimulus: i64,
    error: &LlmError,
    clock: &Clock,
) -> crate::Result<Event> {
    let mut m = tick::slot_meta(
        slot,
        &[
            ("about_event", stimulus.into()),
            ("error", error.to_string().into()),
            ("model", adapter.model().into()),
            ("provider", adapter.provider().into()),
            ("slot", slot.slot.into()),
            ("slot_id", slot.slot_id.clone().into()),
            ("source", SOURCE.into()),
        ],
    );
    if let Some(reason) = error.reason() {
        m.insert("reason".into(), reason.into());
    }
    let content = format!("generation failed for slot {}: {error}", slot.slot);
    w.session(&mut |tx| {
        catch_up(&*tx, p)?;
        let mut events = Vec::new();
        Session {
            tx,
            p: &mut *p,
            events: &mut events,
            clock,
        }
        .put(Kind::GenerationFailure, content.clone(), m.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_stops_at_either_limit() {
        let b = Budget {
            calls_per_day: 2,
            tokens_per_day: 100,
        };
        let s = |calls, tokens| Spent {
            calls,
            tokens,
            replies: 0,
        };
        assert_eq!(over_budget(&b, &s(1, 99)), None);
        assert!(over_budget(&b, &s(2, 0)).unwrap().contains("2 model calls"));
        assert!(over_budget(&b, &s(0, 100)).unwrap().contains("100 tokens"));
    }

    /// Issue 44: a server that reports no usage, 0 tokens for a long prompt, or a count past
    /// i64 is not believed as it stands; a plausible count is kept.
    #[test]
    fn the_budget_counts_what_a_server_underreports() {
        let prompt = "word ".repeat(400);
        assert_eq!(counted(Some(900), &[&prompt]), (900, 900));
        assert_eq!(counted(None, &[&prompt]), (400, 400));
        assert_eq!(counted(Some(0), &[&prompt]), (0, 400), "0 for 2,000 bytes");
        assert_eq!(counted(Some(3), &[&prompt]), (3, 400), "3 for 2,000 bytes");
        assert_eq!(counted(Some(0), &["hi"]), (0, 1));
        assert_eq!(counted(Some(0), &[""]), (0, 0));
        let most = i64::MAX as u64;
        assert_eq!(counted(Some(u64::MAX), &["hi"]), (most, most));
    }

    /// The slot's stimulus is found newest first however many other slots' stimuli lie
    /// between it and the reply (more than a page), and never one at or after the reply.
    #[test]
    fn a_reply_finds_its_slots_stimulus_across_pages() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = crate::store::Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        let mut stimulus = |content: String| {
            let ev =
                crate::event::NewEvent::new(Kind::AutonomyStimulus, content, Default::default());
            l.append_unchecked(&ev.unwrap(), &Clock::System).unwrap().id
        };
        let old = stimulus("slot 600:7 (old)".into());
        let mine = stimulus("slot 600:7".into());
        for i in 0..150 {
            stimulus(format!("slot 600:{}", 1000 + i));
        }
        let later = stimulus("slot 600:7 (later)".into());
        let found = |before, sid| stimulus_before(&l, before, sid).unwrap().map(|e| e.id);
        assert_eq!(found(later, "600:7"), Some(mine));
        assert_eq!(found(mine, "600:7"), Some(old));
        assert_eq!(found(later + 1, "600:7"), Some(later));
        assert_eq!(found(later, "600:99"), None);
    }
}
