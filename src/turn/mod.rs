//! The turn: from a user's message to the last event it causes (SPEC §4 pmm-turn, FORMATS.md
//! §15 minus the defects of §17).
//!
//! 1. One transaction: on a ledger's first turn the default policy and retrieval `config`
//!    events, then `user_message` (and its `embedding_add` under the vector strategy). It is
//!    committed before the model is called, so the message is never lost.
//! 2. Retrieval and the context block, from the projections (checkpoint + the events since) and
//!    a bounded tail: never a scan of the ledger.
//! 3. The model call, outside any transaction (ticks may append meanwhile). A final failure
//!    appends `generation_failure`.
//! 4. One transaction for everything else, computed against the true head (events other
//!    processes appended during the call are folded in first): `assistant_message`, its
//!    embedding, `claim`s (+ their concept bindings), `identity_adoption`s, `commitment_open`s,
//!    `commitment_close`s, `inter_ledger_ref`s, `retrieval_selection`, `metrics_turn`, the
//!    synthesized `reflection` + `meta_summary`, the correction/delta `reflection`,
//!    `summary_update` when due, `lifetime_memory` + its embedding when a chunk is ready.

mod dense;

use crate::canon;
use crate::claim;
use crate::context::embed;
use crate::context::retrieval::{round6, selection_digest};
use crate::context::select::{self, RetrievalConfig, Selection};
use crate::event::config::Strategy;
use crate::event::{Clock, Event, Kind, Source};
use crate::llm::{Adapter, LlmError, Request};
use crate::marker;
use crate::projection::checkpoint;
use crate::projection::graph::NodeKind;
use crate::projection::state::Projections;
use crate::session::{
    append_claims, append_closes, append_delta_reflection, append_opens, append_summary, catch_up,
    concepts, derive, ensure_defaults, markers::append_ref, meta, record_refusal, Session,
};
use crate::store::log::{SessionTxn, SessionWriter};
use crate::store::{self, Filter, Indexes};
use serde_json::{json, Map, Value};

pub use crate::formats::reply::TRUNCATED;
pub use crate::session::{Options, TurnError, DEFAULT_POLICY};

/// What a turn did.
#[derive(Debug, Clone)]
pub struct TurnDone {
    /// Every event the turn appended, in order.
    pub events: Vec<Event>,
    /// The model's reply, unmodified.
    pub reply: String,
    /// Cids opened.
    pub opened: Vec<String>,
    /// Cids closed.
    pub closed: Vec<String>,
    /// Claims recorded (`claim` events): `{"type","data","event"}`.
    pub valid_claims: Vec<Value>,
    /// Claims that failed.
    pub failed_claims: Vec<claim::FailedClaim>,
    /// Event rows this process read from the ledger during the turn.
    pub rows_read: u64,
    /// Markers of the reply beyond [`marker::MAX_MARKERS`] of their kind, not acted on.
    pub ignored_markers: marker::Ignored,
    /// True when the provider says the reply was cut by a token limit (`finish_reason`
    /// "length"): shown as `[truncated]`.
    pub truncated: bool,
    /// Marker lines of the reply that repeat one of the system prompt, not acted on.
    pub echoed_markers: usize,
}

impl TurnDone {
    /// The `{"type":"turn",…}` record.
    pub fn record(&self) -> Value {
        let mut record = json!({
            "type": "turn",
            "reply": self.reply,
            "opened": self.opened,
            "closed": self.closed,
            "claims": {"valid": self.valid_claims, "failed": self.failed_claims.iter().map(|f| json!({
                "line": f.line, "type": f.label, "raw": f.raw, "reason": f.reason,
            })).collect::<Vec<_>>()},
            "events": self.events.len(),
            "first_id": self.events.first().map(|e| e.id),
            "last_id": self.events.last().map(|e| e.id),
            "rows_read": self.rows_read,
        });
        if !self.ignored_markers.is_empty() {
            record["markers_ignored"] = json!(self.ignored_markers);
        }
        if self.truncated {
            record["truncated"] = true.into();
        }
        if self.echoed_markers > 0 {
            record["markers_echoed"] = self.echoed_markers.into();
        }
        record
    }
}

/// The assistant meta's structured-header keys (FORMATS.md §3.6): when the reply's first line
/// is a JSON object with string `intent`, `outcome`, `next` and `self_model`.
fn structured_header(reply: &str) -> Option<String> {
    let first = reply.split('\n').next().unwrap_or(reply);
    let Ok(Value::Object(o)) = serde_json::from_str::<Value>(first) else {
        return None;
    };
    ["intent", "outcome", "next", "self_model"]
        .iter()
        .all(|k| o.get(*k).is_some_and(Value::is_string))
        .then(|| canon::to_string(&Value::Object(o)).ok())
        .flatten()
}

/// Runs one turn for `message` on `ledger` with `adapter`. A write the policy forbids rolls
/// back that transaction and is recorded as a `violation` ([`crate::Error::PolicyViolation`]).
pub fn run<W: SessionWriter>(
    ledger: &mut W,
    adapter: &mut dyn Adapter,
    message: &str,
    opts: &Options,
) -> Result<TurnDone, TurnError> {
    match run_inner(ledger, adapter, message, opts) {
        Err(TurnError::Store(e)) => Err(TurnError::Store(record_refusal(ledger, e, &opts.clock))),
        other => other,
    }
}

/// The turn, stage by stage: record → recall and prompt → call → parse and derive → write.
fn run_inner<W: SessionWriter>(
    ledger: &mut W,
    adapter: &mut dyn Adapter,
    message: &str,
    opts: &Options,
) -> Result<TurnDone, TurnError> {
    let rows_at_start = store::rows_read();
    let mut events = Vec::new();
    let mut dense = dense::Dense::for_message(&*ledger, opts.embedder.as_ref(), message)?;
    let Asked {
        mut p,
        user,
        folded_before,
        cfg,
        prompt,
    } = record_and_prompt(ledger, &mut dense, message, opts, &mut events)?;
    let reply =
        match adapter.generate_with(&prompt.request, opts.stream.as_ref(), opts.cancel.as_ref()) {
            Ok(r) => r,
            Err(error) => {
                let failure = record_failure(
                    ledger,
                    &*adapter,
                    &mut p,
                    &mut events,
                    &user,
                    &error,
                    &opts.clock,
                )?;
                return Err(TurnError::Generation {
                    error,
                    events,
                    failure: Box::new(failure),
                });
            }
        };
    dense.embed_reply(&reply.text);
    let said = Said {
        provider: adapter.provider().to_string(),
        dense: &dense,
        user_id: user.id,
        cfg: &cfg,
        prompt: &prompt,
        reply: &reply,
        message,
        opts,
    };
    let done = write_reply(ledger, &mut p, &mut events, &said)?;
    if folded_before >= checkpoint::CHECKPOINT_EVERY / 4 {
        checkpoint::keeping(&p, |c| ledger.keep_checkpoint(c));
    }
    let truncated = reply.truncated();
    Ok(TurnDone {
        events,
        reply: reply.text,
        opened: done.opened,
        closed: done.closed,
        valid_claims: done.valid_claims,
        failed_claims: done.failed_claims,
        rows_read: store::rows_read() - rows_at_start,
        ignored_markers: done.ignored_markers,
        truncated,
        echoed_markers: done.echoed_markers,
    })
}

/// What stages 1 and 2 leave for the model call: the projections, the user's message, how
/// many events were folded past the checkpoint, the retrieval config and the prompt.
struct Asked {
    p: Projections,
    user: Event,
    folded_before: u64,
    cfg: RetrievalConfig,
    prompt: Prompt,
}

/// Stages 1 and 2: the user's message recorded, then the prompt built in one read snapshot.
/// The in-process model embeds the message on a second core meanwhile; recall asks for the
/// vector when it needs it.
fn record_and_prompt<W: SessionWriter>(
    ledger: &mut W,
    dense: &mut dense::Dense,
    message: &str,
    opts: &Options,
    events: &mut Vec<Event>,
) -> Result<Asked, TurnError> {
    std::thread::scope(|s| {
        let mut later = dense.message_later(message).map(|job| s.spawn(job));
        let mut query = || {
            if let Some(h) = later.take() {
                let made = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                dense.message_embedded(made);
            }
            dense.query.clone()
        };
        let (p, user, folded_before) = record_user(ledger, message, &opts.clock, events)?;
        let cfg = RetrievalConfig::from_config(p.mirror.retrieval.as_ref());
        // One read transaction for recall's many small reads (and one snapshot for them all).
        let prompt = ledger
            .in_snapshot(&mut |l| build_prompt(l, &p, &cfg, message, user.id, opts, &mut query))?;
        query();
        Ok(Asked {
            p,
            user,
            folded_before,
            cfg,
            prompt,
        })
    })
}

/// Stages 4 to 6 in one write transaction, against the true head (what other processes
/// appended during the call folded in first).
fn write_reply<W: SessionWriter>(
    ledger: &mut W,
    p: &mut Projections,
    events: &mut Vec<Event>,
    said: &Said<'_>,
) -> crate::Result<Consequences> {
    ledger.session(&mut |tx| {
        catch_up(&*tx, p)?;
        write_consequences(
            &mut Session {
                tx,
                p: &mut *p,
                events: &mut *events,
                clock: &said.opts.clock,
            },
            said,
        )
    })
}

/// What the model was shown and what it said: the input of the last stage.
struct Said<'a> {
    provider: String,
    dense: &'a dense::Dense,
    user_id: i64,
    cfg: &'a RetrievalConfig,
    prompt: &'a Prompt,
    reply: &'a crate::llm::Reply,
    message: &'a str,
    opts: &'a Options,
}

/// What the reply's markers did.
struct Consequences {
    opened: Vec<String>,
    closed: Vec<String>,
    valid_claims: Vec<Value>,
    failed_claims: Vec<claim::FailedClaim>,
    ignored_markers: marker::Ignored,
    echoed_markers: usize,
}

/// Stage 1: on a first turn the default configs, then the user's message (and its embedding),
/// committed on their own before the model is called, so the message is never lost.
fn record_user<W: SessionWriter>(
    ledger: &mut W,
    message: &str,
    clock: &Clock,
    events: &mut Vec<Event>,
) -> crate::Result<(Projections, Event, u64)> {
    let projected = checkpoint::project(&*ledger, None, true)?;
    let mut first = Some(projected.projections);
    let (p, user) = ledger.session(&mut |tx| {
        // `session` runs this once: the projections move in and out.
        let mut p = first.take().unwrap_or_default();
        let user = record_user_in(tx, &mut p, message, clock, events)?;
        Ok((p, user))
    })?;
    Ok((p, user, projected.folded))
}

/// Stage 1 inside its write transaction: the default configs when missing, then the user's
/// message and, under an embedding strategy, its `embedding_add`.
fn record_user_in(
    tx: &mut dyn SessionTxn,
    p: &mut Projections,
    message: &str,
    clock: &Clock,
    events: &mut Vec<Event>,
) -> crate::Result<Event> {
    catch_up(&*tx, p)?;
    ensure_defaults(tx, p, events, clock)?;
    let mut s = Session {
        tx,
        p,
        events,
        clock,
    };
    let user = s.put(Kind::UserMessage, message, meta(&[("role", "user".into())]))?;
    let cfg = RetrievalConfig::from_config(s.p.mirror.retrieval.as_ref());
    if cfg.embeds() {
        let content = embed::embedding_content(user.id, message, &cfg.model, cfg.dims);
        s.put(Kind::EmbeddingAdd, content, Map::new())?;
    }
    Ok(user)
}

/// Stage 3's failure: a `generation_failure` about the user's message, in its own transaction.
fn record_failure<W: SessionWriter>(
    ledger: &mut W,
    adapter: &dyn Adapter,
    p: &mut Projections,
    events: &mut Vec<Event>,
    user: &Event,
    error: &LlmError,
    clock: &Clock,
) -> crate::Result<Event> {
    let mut m = meta(&[
        ("about_event", user.id.into()),
        ("error", error.to_string().into()),
        ("model", adapter.model().into()),
        ("provider", adapter.provider().into()),
        ("source", Source::PmmTurn.into()),
    ]);
    if let Some(reason) = error.reason() {
        m.insert("reason".into(), reason.into());
    }
    ledger.session(&mut |tx| {
        Session {
            tx,
            p: &mut *p,
            events: &mut *events,
            clock,
        }
        .put(
            Kind::GenerationFailure,
            format!("generation failed: {error}"),
            m.clone(),
        )
    })
}

/// Stages 4 to 6, in one transaction against the true head: the reply, what its markers
/// cause, the retrieval record and metrics, the derived reflections, summary and memory.
fn write_consequences(s: &mut Session<'_, '_>, said: &Said<'_>) -> crate::Result<Consequences> {
    let assistant = append_assistant(s, said)?;
    let about = append_active_indexing(s, said, assistant.id)?;
    // Marker lines that echo the system prompt (the rules, the evidence) are not the model's.
    let (markers, echoed_markers) =
        marker::parse_unechoed(&said.reply.text, &said.prompt.request.system);
    let (valid_claims, failed_claims) = append_claims(s, &markers)?;
    append_identity_adoptions(s)?;
    let opened = append_opens(s, &markers, &about, Source::Assistant.as_str())?;
    let closed = append_closes(s, &markers, Source::Assistant.as_str())?;
    for r in &markers.refs {
        append_ref(s, &r.value)?;
    }
    append_retrieval_record(s, said, assistant.id)?;
    said.dense.store(s.tx, said.user_id, assistant.id)?;
    append_metrics(s, said)?;
    append_reflections(s, &markers, &failed_claims, &opened, &closed, assistant.id)?;
    append_summary(s, false)?;
    append_memory(s)?;
    Ok(Consequences {
        opened,
        closed,
        valid_claims,
        failed_claims,
        ignored_markers: markers.ignored,
        echoed_markers,
    })
}

/// The `assistant_message` (with the structured header's keys when the reply has one) and
/// its embedding.
fn append_assistant(s: &mut Session<'_, '_>, said: &Said<'_>) -> crate::Result<Event> {
    let (reply, opts) = (said.reply, said.opts);
    let mut m = meta(&[
        ("role", "assistant".into()),
        ("provider", said.provider.clone().into()),
        ("model", reply.model.clone().into()),
        ("temperature", json!(opts.temperature)),
        ("top_p", json!(opts.top_p)),
        ("seed", opts.seed.map_or(Value::Null, Value::from)),
        ("prompt_sha256", said.prompt.prompt_sha256.clone().into()),
        ("prompt_format", PROMPT_FORMAT.into()),
        ("reply_to", said.user_id.into()),
    ]);
    if let Some(n) = opts.max_tokens {
        m.insert("max_tokens".into(), n.into());
    }
    if let Some(why) = &reply.finish_reason {
        m.insert("finish_reason".into(), why.as_str().into());
    }
    if let Some(payload) = structured_header(&reply.text) {
        m.insert("assistant_payload".into(), payload.into());
        m.insert("assistant_schema".into(), "assistant.v1".into());
        m.insert("assistant_structured".into(), true.into());
    }
    let assistant = s.put(Kind::AssistantMessage, reply.text.as_str(), m)?;
    if said.cfg.embeds() {
        let cfg = said.cfg;
        let content = embed::embedding_content(assistant.id, &reply.text, &cfg.model, cfg.dims);
        s.put(Kind::EmbeddingAdd, content, Map::new())?;
    }
    Ok(assistant)
}

/// `identity_adoption` for every token both proposed and ratified and not yet adopted.
fn append_identity_adoptions(s: &mut Session<'_, '_>) -> crate::Result<()> {
    for (token, proposal, ratify) in s.p.mirror.identity.pending_adoptions() {
        let content =
            canon::built(&json!({"reason": "identity_proposal+ratification", "token": token}));
        let m = meta(&[
            ("proposal_event_id", proposal.into()),
            ("ratify_event_id", ratify.into()),
            ("source", Source::IdentityManager.into()),
        ]);
        s.put(Kind::IdentityAdoption, content, m)?;
    }
    Ok(())
}

/// Active indexing (FORMATS.md §15 step 4): the concepts the turn is about — the reply
/// header's, and the defined ones the user's text mentions — each bound to the user's message
/// and to the reply, defined first when new. The concepts, for the thread bindings.
fn append_active_indexing(
    s: &mut Session<'_, '_>,
    said: &Said<'_>,
    assistant_id: i64,
) -> crate::Result<Vec<String>> {
    let mentioned =
        crate::context::render::mentioned_concepts(&s.p.concepts.all_tokens(), said.message);
    let about = concepts::turn_concepts(concepts::header_concepts(&said.reply.text), mentioned);
    for tok in &about {
        for id in [said.user_id, assistant_id] {
            let one = std::slice::from_ref(tok);
            concepts::define_then_bind(s, id, one, "relevant_to", Source::ActiveIndexing)?;
        }
    }
    Ok(about)
}

/// The `retrieval_selection`: the reference's keys and digest, and under `hybrid` why each
/// event was recalled, the budget and the history's length.
fn append_retrieval_record(
    s: &mut Session<'_, '_>,
    said: &Said<'_>,
    turn_id: i64,
) -> crate::Result<()> {
    let (cfg, sel) = (said.cfg, &said.prompt.sel);
    let scores: Vec<f64> = sel.scores.iter().map(|x| round6(*x)).collect();
    let mut content = json!({
        "dims": cfg.dims,
        "model": cfg.model,
        "scores": scores,
        "selected": sel.selected,
        "strategy": cfg.strategy.as_str(),
        "turn_id": turn_id,
    });
    if !sel.via.is_empty() || cfg.strategy == Strategy::Hybrid {
        content["via"] = json!(sel.via);
        content["budget"] = json!(said.opts.budget.unwrap_or(cfg.budget));
        content["history"] = json!(said.prompt.request.history.len());
    }
    if let Some(d) = said.dense.record() {
        content["dense"] = d;
    }
    let digest = selection_digest(
        cfg.dims,
        &cfg.model,
        said.message,
        &sel.scores,
        &sel.selected,
    );
    s.put(
        Kind::RetrievalSelection,
        canon::built(&content),
        meta(&[("digest", digest.into())]),
    )?;
    Ok(())
}

/// The `metrics_turn` line: provider, model, tokens (the server's counts, else words), latency.
fn append_metrics(s: &mut Session<'_, '_>, said: &Said<'_>) -> crate::Result<()> {
    let (reply, request) = (said.reply, &said.prompt.request);
    let words = |t: &str| embed::py_split(t).count() as u64;
    let in_tokens = reply
        .in_tokens
        .unwrap_or_else(|| words(&request.system) + words(&request.user));
    let out_tokens = reply.out_tokens.unwrap_or_else(|| words(&reply.text));
    let metrics = format!(
        "provider:{},model:{},in_tokens:{in_tokens},out_tokens:{out_tokens},lat_ms:{}",
        said.provider, reply.model, reply.latency_ms
    );
    s.put(Kind::MetricsTurn, metrics, Map::new())?;
    Ok(())
}

/// The synthesized reflection with its `meta_summary`, then the correction/delta reflection
/// (and the `REF:`s it carries).
fn append_reflections(
    s: &mut Session<'_, '_>,
    markers: &marker::Markers,
    failed: &[claim::FailedClaim],
    opened: &[String],
    closed: &[String],
    assistant_id: i64,
) -> crate::Result<()> {
    let mut window = s.tx.tail(&Filter::default(), derive::WINDOW)?;
    if let Some(content) = derive::synthesized_reflection(&window, s.p) {
        let m = meta(&[("source", Source::PmmTurn.into()), ("synth", "pmm".into())]);
        let refl = s.put(Kind::Reflection, content, m)?;
        if window.len() >= derive::WINDOW {
            window.remove(0);
        }
        window.push(refl.clone());
        let content = derive::meta_summary(&window, s.p, s.head_id()?);
        let m = meta(&[
            ("about_event", refl.id.into()),
            ("source", Source::MetaReflectionEngine.into()),
        ]);
        s.put(Kind::MetaSummary, content, m)?;
    }
    append_delta_reflection(s, markers, failed, opened, closed, assistant_id)
}

/// A `lifetime_memory` chunk (and its embedding) when enough has happened since the last.
fn append_memory(s: &mut Session<'_, '_>) -> crate::Result<()> {
    let last_chunk =
        s.tx.last_of_kind(Kind::LifetimeMemory, 1)?
            .into_iter()
            .next();
    let start = derive::chunk_start(last_chunk.as_ref());
    let mut candidates = Vec::new();
    s.tx.scan(
        &Filter {
            since: Some(start + 1),
            ..Filter::default()
        },
        &mut |e| {
            candidates.push(e);
            Ok(candidates.len() < derive::CHUNK_SCAN)
        },
    )?;
    if let Some((content, m)) = derive::lifetime_memory(&candidates, s.p) {
        let chunk = s.put(Kind::LifetimeMemory, content.as_str(), m)?;
        let emb =
            embed::embedding_content(chunk.id, &content, embed::MODEL, embed::DEFAULT_DIMS as i64);
        s.put(Kind::EmbeddingAdd, emb, Map::new())?;
    }
    Ok(())
}

/// What a turn shows the model, and the record of why.
struct Prompt {
    request: Request,
    sel: Selection,
    prompt_sha256: String,
}

pub use crate::context::prompt::{HISTORY_CHARS, HISTORY_MESSAGES, PROMPT_FORMAT};

/// Stage 2: the recent history, what retrieval chose, the context block, the request and
/// its digest (`prompt_sha256`, [`crate::context::prompt::Prompt::sha256`]).
fn build_prompt<R: Indexes>(
    r: &R,
    p: &Projections,
    cfg: &RetrievalConfig,
    message: &str,
    user_id: i64,
    opts: &Options,
    dense: &mut dyn FnMut() -> Option<crate::recall::DenseQuery>,
) -> crate::Result<Prompt> {
    let history = select::history(r, user_id, HISTORY_MESSAGES, HISTORY_CHARS)?;
    let sel: Selection = if cfg.strategy == Strategy::Hybrid {
        let exclude = history.iter().map(|e| e.id).collect();
        let budget = opts.budget.unwrap_or(cfg.budget);
        select::select_hybrid(r, p, message, user_id, budget, exclude, dense)?
    } else {
        select::select(r, cfg, message, user_id)?
    };
    let sent = crate::context::prompt::render(p, &sel, message, &history);
    let prompt_sha256 = sent.sha256();
    let request = Request {
        system: sent.system,
        user: sent.user,
        history: sent.history,
        temperature: opts.temperature,
        top_p: opts.top_p,
        seed: opts.seed,
        max_tokens: opts.max_tokens,
        turn: p.graph.count_of(NodeKind::UserMessage) as u64,
    };
    Ok(Prompt {
        request,
        sel,
        prompt_sha256,
    })
}

#[cfg(test)]
mod tests;
