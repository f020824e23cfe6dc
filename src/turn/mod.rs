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

pub mod concepts;
mod dense;
pub mod derive;
pub mod reference;

use crate::canon;
use crate::claim::{self, ClaimContext};
use crate::context::embed;
use crate::context::retrieval::{round6, selection_digest};
use crate::context::select::{self, RetrievalConfig, Selection};
use crate::error::ExitStatus;
use crate::event::config::Strategy;
use crate::event::{Clock, Event, Kind, NewEvent};
use crate::llm::{Adapter, Cancel, LlmError, Request, TextSink};
use crate::marker;
use crate::projection::graph::NodeKind;
use crate::projection::mirror::{self, commitment_cid};
use crate::projection::state::Projections;
use crate::store::{self, Batch, Filter, Ledger, Reads, Refusal};
use serde_json::{json, Map, Value};

/// The reference's default write policy, written on a ledger's first turn.
pub const DEFAULT_POLICY: &str = r#"{"forbid_sources":{"cli":["config","checkpoint_manifest","embedding_add","retrieval_selection"]},"type":"policy"}"#;

/// How a turn calls the model.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sampling temperature (default 0).
    pub temperature: f64,
    /// Nucleus sampling (default 1).
    pub top_p: f64,
    /// Seed, passed to providers that take one.
    pub seed: Option<u64>,
    /// The most tokens a reply may have; `None` leaves it to the server.
    pub max_tokens: Option<u32>,
    /// Characters of recalled text (the `hybrid` strategy); `None` takes the retrieval
    /// config's `budget`.
    pub budget: Option<usize>,
    /// Where timestamps come from.
    pub clock: Clock,
    /// Streams the reply: each piece goes here as it is generated (the HTTP adapters then ask
    /// for a streamed answer). The reply is still appended once, whole, after it ends.
    pub stream: Option<TextSink>,
    /// Cancels the model call once raised: the turn then appends a `generation_failure` with
    /// `reason` `interrupted` and ends with [`TurnError::Generation`].
    pub cancel: Option<Cancel>,
    /// The sentence-embedding model of the dense recall source (none: full text and concepts
    /// only). The turn embeds the user's message and the reply, and stores both vectors.
    pub embedder: Option<crate::llm::embed::Shared>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            temperature: 0.0,
            top_p: 1.0,
            seed: None,
            max_tokens: None,
            budget: None,
            clock: Clock::System,
            stream: None,
            cancel: None,
            embedder: None,
        }
    }
}

pub use crate::formats::reply::TRUNCATED;

/// What a turn did.
#[derive(Debug, Clone)]
pub struct Outcome {
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

impl Outcome {
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

/// Why a turn did not finish.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The model failed for good; the user's message and a `generation_failure` event are in
    /// the ledger (exit 3).
    #[error("{error} (recorded as event {})", failure.id)]
    Generation {
        /// The error.
        error: LlmError,
        /// The events written (the user message …, the failure last).
        events: Vec<Event>,
        /// The `generation_failure` event.
        failure: Box<Event>,
    },
    /// The ledger could not be read or written.
    #[error(transparent)]
    Store(#[from] crate::Error),
}

impl ExitStatus for TurnError {
    /// 3 when the model failed (128 + the signal when the call was interrupted), else the
    /// store error's own status.
    fn exit_code(&self) -> u8 {
        match self {
            TurnError::Generation { error, .. } => error.exit_status().unwrap_or(3),
            TurnError::Store(e) => e.exit_code(),
        }
    }
}

impl From<TurnError> for crate::Error {
    /// A store error stays itself; a failed generation keeps its exit status.
    fn from(e: TurnError) -> Self {
        match e {
            TurnError::Store(e) => e,
            e => crate::Error::with_exit_status(e),
        }
    }
}

pub(crate) fn meta(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

pub(crate) fn new_event(
    kind: Kind,
    content: impl Into<String>,
    m: Map<String, Value>,
) -> crate::Result<NewEvent> {
    NewEvent::new(kind, content, m).map_err(|e| crate::Error::bad_input(None, e))
}

/// Appends inside a batch. A policy refusal is [`crate::Error::Refused`]: the whole write is
/// rolled back, and [`record_refusal`] then appends the `violation` (SPEC §2.5).
pub(crate) fn put(
    batch: &mut Batch<'_>,
    p: &mut Projections,
    out: &mut Vec<Event>,
    ev: NewEvent,
    clock: &Clock,
) -> crate::Result<Event> {
    match batch.append(&ev, clock) {
        Ok(e) => {
            p.apply(&e);
            out.push(e.clone());
            Ok(e)
        }
        Err(Refusal::Policy(v)) => Err(crate::Error::Refused(Box::new(v))),
        Err(Refusal::Error(e)) => Err(e),
    }
}

/// On a ledger's first use by a runtime program (SPEC §2.5): the reference's default write
/// policy and retrieval `config` events, when the ledger has none.
pub(crate) fn ensure_defaults(
    batch: &mut Batch<'_>,
    p: &mut Projections,
    events: &mut Vec<Event>,
    clock: &Clock,
) -> crate::Result<()> {
    if !batch.has_policy_config()? {
        let ev = new_event(
            Kind::Config,
            DEFAULT_POLICY,
            meta(&[("source", "autonomy_kernel".into())]),
        )?;
        put(batch, p, events, ev, clock)?;
    }
    if p.mirror.retrieval.is_none() {
        let ev = new_event(
            Kind::Config,
            RetrievalConfig::DEFAULT_CONTENT,
            meta(&[("source", "autonomy_kernel".into())]),
        )?;
        put(batch, p, events, ev, clock)?;
    }
    Ok(())
}

/// After a write that [`put`] found forbidden was rolled back: appends the `violation` in a
/// transaction of its own and gives the error to report (exit 1). Other errors pass through.
pub(crate) fn record_refusal(ledger: &mut Ledger, e: crate::Error, clock: &Clock) -> crate::Error {
    match e {
        crate::Error::Refused(v) => ledger.record_violation(&v, clock).unwrap_or_else(|e| e),
        other => other,
    }
}

/// Appends a `summary_update` (FORMATS.md §7.4) against the newest summary when the gate lets
/// it through, or whatever the gate says with `force` (a `summarize` tick).
pub(crate) fn append_summary(
    batch: &mut Batch<'_>,
    p: &mut Projections,
    events: &mut Vec<Event>,
    clock: &Clock,
    force: bool,
) -> crate::Result<()> {
    let previous = match p.autonomy.last_summary {
        Some(id) => batch.get(id)?,
        None => None,
    };
    let after = previous.as_ref().map_or(0, |e| e.id);
    let head = p.mirror.last_event_id;
    let inputs = derive::SummaryInputs {
        previous: previous.as_ref(),
        events_since: head.saturating_sub(after),
        reflections_since: batch.count_kind_after(Kind::Reflection, after)?,
        last_event_id: head,
        force,
    };
    if let Some((content, m)) = derive::summary_update(p, &inputs) {
        put(
            batch,
            p,
            events,
            new_event(Kind::SummaryUpdate, content, m)?,
            clock,
        )?;
    }
    Ok(())
}

/// Folds events past the projections' last id into them (what other processes appended), or
/// projects them anew when one of those is an erasure ([`store::catch_up`]: the turn must not
/// write what it derives from erased text).
pub(crate) fn catch_up<R: Reads>(r: &R, p: &mut Projections) -> crate::Result<()> {
    store::catch_up(r, p, None).map(|_| ())
}

/// The claim checker's view of the ledger. A database error while looking an event up is
/// kept and ends the turn's write ([`LedgerClaims::failure`]): it must never be recorded as a
/// claim that failed because the event "does not exist".
struct LedgerClaims<'a, 'b> {
    batch: &'a Batch<'b>,
    p: &'a Projections,
    error: std::cell::RefCell<Option<crate::Error>>,
}

impl LedgerClaims<'_, '_> {
    /// The first database error a look-up met, if any.
    fn failure(self) -> Option<crate::Error> {
        self.error.into_inner()
    }
}

impl ClaimContext for LedgerClaims<'_, '_> {
    fn event_exists(&self, id: i64) -> bool {
        if id < 1 {
            return false;
        }
        match self.batch.get(id) {
            Ok(found) => found.is_some(),
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e);
                false
            }
        }
    }
    fn commitment_is_open(&self, cid: &str) -> bool {
        self.p.mirror.open.contains_key(cid)
    }
    fn commitment_was_opened(&self, cid: &str) -> Option<bool> {
        Some(self.p.mirror.open.contains_key(cid) || self.p.mirror.closed.contains_key(cid))
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
pub fn run(
    ledger: &mut Ledger,
    adapter: &mut dyn Adapter,
    message: &str,
    opts: &Options,
) -> Result<Outcome, TurnError> {
    match run_inner(ledger, adapter, message, opts) {
        Err(TurnError::Store(e)) => Err(TurnError::Store(record_refusal(ledger, e, &opts.clock))),
        other => other,
    }
}

/// The turn, stage by stage: record → recall and prompt → call → parse and derive → write.
fn run_inner(
    ledger: &mut Ledger,
    adapter: &mut dyn Adapter,
    message: &str,
    opts: &Options,
) -> Result<Outcome, TurnError> {
    let rows_at_start = store::rows_read();
    let mut events = Vec::new();
    let mut dense = dense::Dense::for_message(&*ledger, opts.embedder.as_ref(), message)?;
    let (mut p, user, folded_before, cfg, prompt) = std::thread::scope(|s| {
        // The in-process model embeds the message on a second core while this one records it
        // and ranks full text; recall asks for the vector when it needs it.
        let mut later = dense.message_later(message).map(|job| s.spawn(job));
        let mut query = || {
            if let Some(h) = later.take() {
                let made = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                dense.message_embedded(made);
            }
            dense.query.clone()
        };
        let (p, user, folded_before) = record_user(ledger, message, &opts.clock, &mut events)?;
        let cfg = RetrievalConfig::from_config(p.mirror.retrieval.as_ref());
        // One read transaction for recall's many small reads (and one snapshot for them all).
        let prompt = ledger
            .in_snapshot(|l| build_prompt(l, &p, &cfg, message, user.id, opts, &mut query))?;
        query();
        Ok::<_, TurnError>((p, user, folded_before, cfg, prompt))
    })?;
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
    let mut batch = ledger.begin()?;
    catch_up(&batch, &mut p)?;
    let done = write_consequences(
        &mut Sink {
            batch: &mut batch,
            p: &mut p,
            events: &mut events,
            clock: &opts.clock,
        },
        &said,
    )?;
    batch.commit()?;
    if folded_before >= store::CHECKPOINT_EVERY / 4 {
        store::save_projection_checkpoint(ledger.path(), &p);
    }
    let truncated = reply.truncated();
    Ok(Outcome {
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

/// Where a stage writes, in a turn or a tick: the open transaction, the projections each event
/// is folded into as it is written (so later events see earlier ones), and the list of what was
/// written.
pub(crate) struct Sink<'s, 'b> {
    pub(crate) batch: &'s mut Batch<'b>,
    pub(crate) p: &'s mut Projections,
    pub(crate) events: &'s mut Vec<Event>,
    pub(crate) clock: &'s Clock,
}

impl Sink<'_, '_> {
    /// Appends one event (policy checked) and folds it in.
    pub(crate) fn put(
        &mut self,
        kind: Kind,
        content: impl Into<String>,
        m: Map<String, Value>,
    ) -> crate::Result<Event> {
        put(
            self.batch,
            self.p,
            self.events,
            new_event(kind, content, m)?,
            self.clock,
        )
    }

    /// The head as this transaction sees it.
    pub(crate) fn head_id(&self) -> i64 {
        self.batch.head().map_or(0, |h| h.id)
    }
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
fn record_user(
    ledger: &mut Ledger,
    message: &str,
    clock: &Clock,
    events: &mut Vec<Event>,
) -> crate::Result<(Projections, Event, u64)> {
    let projected = store::project(&*ledger, None, true)?;
    let mut p = projected.projections;
    let mut batch = ledger.begin()?;
    catch_up(&batch, &mut p)?;
    ensure_defaults(&mut batch, &mut p, events, clock)?;
    let mut s = Sink {
        batch: &mut batch,
        p: &mut p,
        events,
        clock,
    };
    let user = s.put(Kind::UserMessage, message, meta(&[("role", "user".into())]))?;
    let cfg = RetrievalConfig::from_config(s.p.mirror.retrieval.as_ref());
    if cfg.embeds() {
        let content = embed::embedding_content(user.id, message, &cfg.model, cfg.dims);
        s.put(Kind::EmbeddingAdd, content, Map::new())?;
    }
    batch.commit()?;
    Ok((p, user, projected.folded))
}

/// Stage 3's failure: a `generation_failure` about the user's message, in its own transaction.
fn record_failure(
    ledger: &mut Ledger,
    adapter: &dyn Adapter,
    p: &mut Projections,
    events: &mut Vec<Event>,
    user: &Event,
    error: &LlmError,
    clock: &Clock,
) -> crate::Result<Event> {
    let mut batch = ledger.begin()?;
    let mut m = meta(&[
        ("about_event", user.id.into()),
        ("error", error.to_string().into()),
        ("model", adapter.model().into()),
        ("provider", adapter.provider().into()),
        ("source", "pmm-turn".into()),
    ]);
    if let Some(reason) = error.reason() {
        m.insert("reason".into(), reason.into());
    }
    let failure = Sink {
        batch: &mut batch,
        p,
        events,
        clock,
    }
    .put(
        Kind::GenerationFailure,
        format!("generation failed: {error}"),
        m,
    )?;
    batch.commit()?;
    Ok(failure)
}

/// Stages 4 to 6, in one transaction against the true head: the reply, what its markers
/// cause, the retrieval record and metrics, the derived reflections, summary and memory.
fn write_consequences(s: &mut Sink<'_, '_>, said: &Said<'_>) -> crate::Result<Consequences> {
    let assistant = append_assistant(s, said)?;
    let about = append_active_indexing(s, said, assistant.id)?;
    // Marker lines that echo the system prompt (the rules, the evidence) are not the model's.
    let (markers, echoed_markers) =
        marker::parse_unechoed(&said.reply.text, &said.prompt.request.system);
    let (valid_claims, failed_claims) = append_claims(s, &markers)?;
    append_identity_adoptions(s)?;
    let opened = append_opens(s, &markers, &about, "assistant")?;
    let closed = append_closes(s, &markers, "assistant")?;
    for r in &markers.refs {
        append_ref(s.batch, s.p, s.events, &r.value, s.clock)?;
    }
    append_retrieval_record(s, said, assistant.id)?;
    said.dense.store(s.batch, said.user_id, assistant.id)?;
    append_metrics(s, said)?;
    append_reflections(s, &markers, &failed_claims, &opened, &closed, assistant.id)?;
    append_summary(s.batch, s.p, s.events, s.clock, false)?;
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
fn append_assistant(s: &mut Sink<'_, '_>, said: &Said<'_>) -> crate::Result<Event> {
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

/// Claims, each on its own (a bad one fails only itself): the valid ones as `claim` events
/// bound to their type; the records of valid and failed claims.
pub(crate) fn append_claims(
    s: &mut Sink<'_, '_>,
    markers: &marker::Markers,
) -> crate::Result<(Vec<Value>, Vec<claim::FailedClaim>)> {
    let ctx = LedgerClaims {
        batch: s.batch,
        p: s.p,
        error: std::cell::RefCell::new(None),
    };
    let (valid, failed) = claim::check_all(&markers.claims, &ctx);
    let valid: Vec<marker::ClaimMarker> = valid.into_iter().map(|l| l.value.clone()).collect();
    if let Some(e) = ctx.failure() {
        return Err(e);
    }
    let mut records = Vec::new();
    for c in &valid {
        let ce = s.put(
            Kind::Claim,
            claim::claim_content(c),
            meta(&[
                ("claim_type", c.claim_type.clone().into()),
                ("validated", true.into()),
            ]),
        )?;
        let bind = json!({"event_id": ce.id, "relation": "describes", "tokens": [c.claim_type]});
        s.put(
            Kind::ConceptBindEvent,
            canon::to_string(&bind).unwrap_or_default(),
            meta(&[("source", "auto_binder".into())]),
        )?;
        records.push(json!({"type": c.claim_type, "data": c.data, "event": ce.id}));
    }
    Ok((records, failed))
}

/// `identity_adoption` for every token both proposed and ratified and not yet adopted.
fn append_identity_adoptions(s: &mut Sink<'_, '_>) -> crate::Result<()> {
    for (token, proposal, ratify) in s.p.mirror.identity.pending_adoptions() {
        let content =
            canon::to_string(&json!({"reason": "identity_proposal+ratification", "token": token}))
                .unwrap_or_default();
        let m = meta(&[
            ("proposal_event_id", proposal.into()),
            ("ratify_event_id", ratify.into()),
            ("source", "identity_manager".into()),
        ]);
        s.put(Kind::IdentityAdoption, content, m)?;
    }
    Ok(())
}

/// Active indexing (FORMATS.md §15 step 4): the concepts the turn is about — the reply
/// header's, and the defined ones the user's text mentions — each bound to the user's message
/// and to the reply, defined first when new. The concepts, for the thread bindings.
fn append_active_indexing(
    s: &mut Sink<'_, '_>,
    said: &Said<'_>,
    assistant_id: i64,
) -> crate::Result<Vec<String>> {
    let mentioned =
        crate::context::render::mentioned_concepts(&s.p.concepts.all_tokens(), said.message);
    let about = concepts::turn_concepts(concepts::header_concepts(&said.reply.text), mentioned);
    for tok in &about {
        for id in [said.user_id, assistant_id] {
            let one = std::slice::from_ref(tok);
            concepts::define_then_bind(s, id, one, "relevant_to", concepts::ACTIVE_INDEXING)?;
        }
    }
    Ok(about)
}

/// A `commitment_open` per `COMMIT:` line, each followed by the binding of the turn's
/// concepts to its thread; the cids opened. `source` is the writer's `meta.source`
/// (`assistant` for a turn's reply, `autonomy_kernel` for a thinking tick's); the origin is
/// the model's either way.
pub(crate) fn append_opens(
    s: &mut Sink<'_, '_>,
    markers: &marker::Markers,
    about: &[String],
    source: &str,
) -> crate::Result<Vec<String>> {
    let mut opened = Vec::new();
    for c in &markers.commits {
        let cid = commitment_cid(&c.value);
        let score = derive::impact_score(s.p, &cid, s.head_id());
        let ev = mirror::commitment_open(&c.value, score, "assistant", source);
        let open = s.put(ev.kind, ev.content, ev.meta)?;
        concepts::bind_thread(s, &cid, open.id, about, "loop")?;
        opened.push(cid);
    }
    Ok(opened)
}

/// A `commitment_close` per `CLOSE:` line naming an open commitment; the cids closed.
/// `source` as for [`append_opens`].
pub(crate) fn append_closes(
    s: &mut Sink<'_, '_>,
    markers: &marker::Markers,
    source: &str,
) -> crate::Result<Vec<String>> {
    let mut closed = Vec::new();
    for c in &markers.closes {
        if !s.p.mirror.open.contains_key(&c.value) {
            continue;
        }
        let m = meta(&[
            ("cid", c.value.clone().into()),
            ("origin", "assistant".into()),
            ("source", source.into()),
        ]);
        s.put(Kind::CommitmentClose, mirror::close_content(&c.value), m)?;
        closed.push(c.value.clone());
    }
    Ok(closed)
}

/// The `retrieval_selection`: the reference's keys and digest, and under `hybrid` why each
/// event was recalled, the budget and the history's length.
fn append_retrieval_record(
    s: &mut Sink<'_, '_>,
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
        canon::to_string(&content).unwrap_or_default(),
        meta(&[("digest", digest.into())]),
    )?;
    Ok(())
}

/// The `metrics_turn` line: provider, model, tokens (the server's counts, else words), latency.
fn append_metrics(s: &mut Sink<'_, '_>, said: &Said<'_>) -> crate::Result<()> {
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
    s: &mut Sink<'_, '_>,
    markers: &marker::Markers,
    failed: &[claim::FailedClaim],
    opened: &[String],
    closed: &[String],
    assistant_id: i64,
) -> crate::Result<()> {
    let mut window = s.batch.tail(&Filter::default(), derive::WINDOW)?;
    if let Some(content) = derive::synthesized_reflection(&window, s.p) {
        let m = meta(&[("source", "pmm-turn".into()), ("synth", "pmm".into())]);
        let refl = s.put(Kind::Reflection, content, m)?;
        if window.len() >= derive::WINDOW {
            window.remove(0);
        }
        window.push(refl.clone());
        let content = derive::meta_summary(&window, s.p, s.head_id());
        let m = meta(&[
            ("about_event", refl.id.into()),
            ("source", "meta_reflection_engine".into()),
        ]);
        s.put(Kind::MetaSummary, content, m)?;
    }
    append_delta_reflection(s, markers, failed, opened, closed, assistant_id)
}

/// The correction/delta reflection about the reply `assistant_id` (what its markers did,
/// its `REFLECT:`), and the `REF:`s it carries.
pub(crate) fn append_delta_reflection(
    s: &mut Sink<'_, '_>,
    markers: &marker::Markers,
    failed: &[claim::FailedClaim],
    opened: &[String],
    closed: &[String],
    assistant_id: i64,
) -> crate::Result<()> {
    let reflect = markers.reflect.as_ref().and_then(|r| r.value.as_ref().ok());
    if let Some(text) = claim::delta_text(failed, opened, closed, reflect) {
        s.put(
            Kind::Reflection,
            text.as_str(),
            meta(&[("about_event", assistant_id.into())]),
        )?;
        for r in marker::parse(&text).refs {
            append_ref(s.batch, s.p, s.events, &r.value, s.clock)?;
        }
    }
    Ok(())
}

/// A `lifetime_memory` chunk (and its embedding) when enough has happened since the last.
fn append_memory(s: &mut Sink<'_, '_>) -> crate::Result<()> {
    let last_chunk = s
        .batch
        .last_of_kind(Kind::LifetimeMemory, 1)?
        .into_iter()
        .next();
    let start = derive::chunk_start(last_chunk.as_ref());
    let mut candidates = Vec::new();
    s.batch.scan(
        &Filter {
            since: Some(start + 1),
            ..Filter::default()
        },
        |e| {
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
fn build_prompt<R: Reads>(
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

fn append_ref(
    batch: &mut Batch<'_>,
    p: &mut Projections,
    out: &mut Vec<Event>,
    target: &str,
    clock: &Clock,
) -> crate::Result<()> {
    let Some(req) = claim::parse_ref(target) else {
        return Ok(());
    };
    let outcome = claim::RefOutcome::from(reference::resolve(&req));
    let ev = new_event(Kind::InterLedgerRef, req.content(), outcome.meta_map())?;
    put(batch, p, out, ev, clock)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default policy forbids `cli` exactly the kinds the policy guards.
    #[test]
    fn default_policy_lists_the_sensitive_kinds() {
        let v: Value = serde_json::from_str(DEFAULT_POLICY).unwrap();
        let listed: Vec<&str> = v["forbid_sources"]["cli"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        let mut sensitive: Vec<&str> = Kind::ALL
            .iter()
            .filter(|k| k.is_sensitive())
            .map(Kind::as_str)
            .collect();
        let mut sorted = listed.clone();
        sorted.sort_unstable();
        sensitive.sort_unstable();
        assert_eq!(sorted, sensitive);
    }
}
