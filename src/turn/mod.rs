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

pub mod derive;

use crate::canon;
use crate::claim::{self, ClaimContext};
use crate::context::embed;
use crate::context::render;
use crate::context::retrieval::{round6, selection_digest};
use crate::context::select::{self, RetrievalConfig, Selection};
use crate::event::{Clock, Event, NewEvent};
use crate::llm::{Adapter, Cancel, LlmError, Request, TextSink};
use crate::marker;
use crate::projection::mirror::commitment_cid;
use crate::projection::state::Projections;
use crate::store::{self, Batch, Filter, Ledger, Reads, Refusal};
use serde_json::{json, Map, Value};
use std::path::Path;

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
        }
    }
}

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

pub(crate) fn meta(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

pub(crate) fn new_event(
    kind: &str,
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
            "config",
            DEFAULT_POLICY,
            meta(&[("source", "autonomy_kernel".into())]),
        )?;
        put(batch, p, events, ev, clock)?;
    }
    if p.mirror.retrieval.is_none() {
        let ev = new_event(
            "config",
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
        events_since: head - after,
        reflections_since: batch.count_kind_after("reflection", after)?,
        last_event_id: head,
        force,
    };
    if let Some((content, m)) = derive::summary_update(p, &inputs) {
        put(
            batch,
            p,
            events,
            new_event("summary_update", content, m)?,
            clock,
        )?;
    }
    Ok(())
}

/// Folds events past the projections' last id into them (what other processes appended).
pub(crate) fn catch_up<R: Reads>(r: &R, p: &mut Projections) -> crate::Result<()> {
    let since = p.mirror.last_event_id + 1;
    r.scan(
        &Filter {
            since: Some(since),
            ..Filter::default()
        },
        |e| {
            p.apply(&e);
            Ok(true)
        },
    )
}

struct LedgerClaims<'a, 'b> {
    batch: &'a Batch<'b>,
    p: &'a Projections,
}

impl ClaimContext for LedgerClaims<'_, '_> {
    fn event_exists(&self, id: i64) -> bool {
        id >= 1 && self.batch.get(id).ok().flatten().is_some()
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

fn run_inner(
    ledger: &mut Ledger,
    adapter: &mut dyn Adapter,
    message: &str,
    opts: &Options,
) -> Result<Outcome, TurnError> {
    let rows_at_start = store::rows_read();
    let clock = &opts.clock;
    let mut events = Vec::new();

    // 1. The user's message, committed on its own.
    let projected = store::project(&*ledger, None, true)?;
    let mut p = projected.projections;
    let folded_before = projected.folded;
    let user = {
        let mut batch = ledger.begin()?;
        catch_up(&batch, &mut p)?;
        ensure_defaults(&mut batch, &mut p, &mut events, clock)?;
        let user = put(
            &mut batch,
            &mut p,
            &mut events,
            new_event("user_message", message, meta(&[("role", "user".into())]))?,
            clock,
        )?;
        let cfg = RetrievalConfig::from_config(p.mirror.retrieval.as_ref());
        if cfg.embeds() {
            let content = embed::embedding_content(user.id, message, &cfg.model, cfg.dims);
            put(
                &mut batch,
                &mut p,
                &mut events,
                new_event("embedding_add", content, Map::new())?,
                clock,
            )?;
        }
        batch.commit()?;
        user
    };

    // 2. Recall, the context block and the request.
    let cfg = RetrievalConfig::from_config(p.mirror.retrieval.as_ref());
    let Prompt {
        request,
        sel,
        prompt_sha256,
    } = build_prompt(&*ledger, &p, &cfg, message, user.id, opts)?;

    // 3. The model.
    let reply = match adapter.generate_with(&request, opts.stream.as_ref(), opts.cancel.as_ref()) {
        Ok(r) => r,
        Err(error) => {
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
            let failure = put(
                &mut batch,
                &mut p,
                &mut events,
                new_event(
                    "generation_failure",
                    format!("generation failed: {error}"),
                    m,
                )?,
                clock,
            )?;
            batch.commit()?;
            return Err(TurnError::Generation {
                error,
                events,
                failure: Box::new(failure),
            });
        }
    };
    let text = reply.text.clone();

    // 4. Everything else, in one transaction against the true head.
    let mut batch = ledger.begin()?;
    catch_up(&batch, &mut p)?;
    let mut m = meta(&[
        ("role", "assistant".into()),
        ("provider", adapter.provider().into()),
        ("model", reply.model.clone().into()),
        ("temperature", json!(opts.temperature)),
        ("top_p", json!(opts.top_p)),
        ("seed", opts.seed.map_or(Value::Null, Value::from)),
        ("prompt_sha256", prompt_sha256.into()),
    ]);
    if let Some(n) = opts.max_tokens {
        m.insert("max_tokens".into(), n.into());
    }
    if let Some(payload) = structured_header(&text) {
        m.insert("assistant_payload".into(), payload.into());
        m.insert("assistant_schema".into(), "assistant.v1".into());
        m.insert("assistant_structured".into(), true.into());
    }
    let assistant = put(
        &mut batch,
        &mut p,
        &mut events,
        new_event("assistant_message", text.as_str(), m)?,
        clock,
    )?;
    if cfg.embeds() {
        let content = embed::embedding_content(assistant.id, &text, &cfg.model, cfg.dims);
        put(
            &mut batch,
            &mut p,
            &mut events,
            new_event("embedding_add", content, Map::new())?,
            clock,
        )?;
    }

    let markers = marker::parse(&text);

    // Claims, each on its own: a bad one fails only itself.
    let mut valid_claims = Vec::new();
    let (valid, failed) = claim::check_all(
        &markers.claims,
        &LedgerClaims {
            batch: &batch,
            p: &p,
        },
    );
    let valid: Vec<marker::ClaimMarker> = valid.into_iter().map(|l| l.value.clone()).collect();
    for c in &valid {
        let ev = new_event(
            "claim",
            claim::claim_content(c),
            meta(&[
                ("claim_type", c.claim_type.clone().into()),
                ("validated", true.into()),
            ]),
        )?;
        let ce = put(&mut batch, &mut p, &mut events, ev, clock)?;
        let bind = json!({"event_id": ce.id, "relation": "describes", "tokens": [c.claim_type]});
        let ev = new_event(
            "concept_bind_event",
            canon::to_string(&bind).unwrap_or_default(),
            meta(&[("source", "auto_binder".into())]),
        )?;
        put(&mut batch, &mut p, &mut events, ev, clock)?;
        valid_claims.push(json!({"type": c.claim_type, "data": c.data, "event": ce.id}));
    }
    for (token, proposal, ratify) in p.mirror.identity.pending_adoptions() {
        let content =
            canon::to_string(&json!({"reason": "identity_proposal+ratification", "token": token}))
                .unwrap_or_default();
        let m = meta(&[
            ("proposal_event_id", proposal.into()),
            ("ratify_event_id", ratify.into()),
            ("source", "identity_manager".into()),
        ]);
        put(
            &mut batch,
            &mut p,
            &mut events,
            new_event("identity_adoption", content, m)?,
            clock,
        )?;
    }

    // Commitments.
    let mut opened = Vec::new();
    for c in &markers.commits {
        let cid = commitment_cid(&c.value);
        let score = derive::impact_score(&p, &cid, batch.head().map_or(0, |h| h.id));
        let m = meta(&[
            ("cid", cid.clone().into()),
            ("impact_score", json!(score)),
            ("origin", "assistant".into()),
            ("source", "assistant".into()),
            ("text", c.value.clone().into()),
        ]);
        put(
            &mut batch,
            &mut p,
            &mut events,
            new_event(
                "commitment_open",
                format!("Commitment opened: {}", c.value),
                m,
            )?,
            clock,
        )?;
        opened.push(cid);
    }
    let mut closed = Vec::new();
    for c in &markers.closes {
        if !p.mirror.open.contains_key(&c.value) {
            continue;
        }
        let m = meta(&[
            ("cid", c.value.clone().into()),
            ("origin", "assistant".into()),
            ("source", "assistant".into()),
        ]);
        put(
            &mut batch,
            &mut p,
            &mut events,
            new_event(
                "commitment_close",
                format!("Commitment closed: {}", c.value),
                m,
            )?,
            clock,
        )?;
        closed.push(c.value.clone());
    }

    // References to other ledgers: read only, never created.
    for r in &markers.refs {
        append_ref(&mut batch, &mut p, &mut events, &r.value, clock)?;
    }

    // Retrieval record and metrics.
    let scores: Vec<f64> = sel.scores.iter().map(|s| round6(*s)).collect();
    let mut content = json!({
        "dims": cfg.dims,
        "model": cfg.model,
        "scores": scores,
        "selected": sel.selected,
        "strategy": cfg.strategy,
        "turn_id": assistant.id,
    });
    if !sel.via.is_empty() || cfg.strategy == "hybrid" {
        content["via"] = json!(sel.via);
        content["budget"] = json!(opts.budget.unwrap_or(cfg.budget));
        content["history"] = json!(request.history.len());
    }
    let digest = selection_digest(cfg.dims, &cfg.model, message, &sel.scores, &sel.selected);
    put(
        &mut batch,
        &mut p,
        &mut events,
        new_event(
            "retrieval_selection",
            canon::to_string(&content).unwrap_or_default(),
            meta(&[("digest", digest.into())]),
        )?,
        clock,
    )?;
    let words = |s: &str| embed::py_split(s).count() as u64;
    let in_tokens = reply
        .in_tokens
        .unwrap_or_else(|| words(&request.system) + words(&request.user));
    let out_tokens = reply.out_tokens.unwrap_or_else(|| words(&text));
    let metrics = format!(
        "provider:{},model:{},in_tokens:{in_tokens},out_tokens:{out_tokens},lat_ms:{}",
        adapter.provider(),
        reply.model,
        reply.latency_ms
    );
    put(
        &mut batch,
        &mut p,
        &mut events,
        new_event("metrics_turn", metrics, Map::new())?,
        clock,
    )?;

    // Reflections.
    let window = batch.tail(&Filter::default(), derive::WINDOW)?;
    if let Some(content) = derive::synthesized_reflection(&window, &p) {
        let refl = put(
            &mut batch,
            &mut p,
            &mut events,
            new_event(
                "reflection",
                content,
                meta(&[("source", "pmm-turn".into()), ("synth", "pmm".into())]),
            )?,
            clock,
        )?;
        let mut window = window;
        if window.len() >= derive::WINDOW {
            window.remove(0);
        }
        window.push(refl.clone());
        let count = batch.head().map_or(0, |h| h.id);
        let content = derive::meta_summary(&window, &p, count);
        put(
            &mut batch,
            &mut p,
            &mut events,
            new_event(
                "meta_summary",
                content,
                meta(&[
                    ("about_event", refl.id.into()),
                    ("source", "meta_reflection_engine".into()),
                ]),
            )?,
            clock,
        )?;
    }
    let reflect = markers.reflect.as_ref().and_then(|r| r.value.as_ref().ok());
    if let Some(text) = claim::delta_text(&failed, &opened, &closed, reflect) {
        put(
            &mut batch,
            &mut p,
            &mut events,
            new_event(
                "reflection",
                text.as_str(),
                meta(&[("about_event", assistant.id.into())]),
            )?,
            clock,
        )?;
        for r in marker::parse(&text).refs {
            append_ref(&mut batch, &mut p, &mut events, &r.value, clock)?;
        }
    }

    // Summary and lifetime memory, when due.
    append_summary(&mut batch, &mut p, &mut events, clock, false)?;
    let last_chunk = batch.last_of_kind("lifetime_memory", 1)?.into_iter().next();
    let start = derive::chunk_start(last_chunk.as_ref());
    let mut candidates = Vec::new();
    batch.scan(
        &Filter {
            since: Some(start + 1),
            ..Filter::default()
        },
        |e| {
            candidates.push(e);
            Ok(candidates.len() < derive::CHUNK_SCAN)
        },
    )?;
    if let Some((content, m)) = derive::lifetime_memory(&candidates, &p) {
        let chunk = put(
            &mut batch,
            &mut p,
            &mut events,
            new_event("lifetime_memory", content.as_str(), m)?,
            clock,
        )?;
        let emb =
            embed::embedding_content(chunk.id, &content, embed::MODEL, embed::DEFAULT_DIMS as i64);
        put(
            &mut batch,
            &mut p,
            &mut events,
            new_event("embedding_add", emb, Map::new())?,
            clock,
        )?;
    }
    batch.commit()?;

    if folded_before >= store::CHECKPOINT_EVERY / 4 {
        store::save_projection_checkpoint(ledger.path(), &p);
    }

    Ok(Outcome {
        events,
        reply: text,
        opened,
        closed,
        valid_claims,
        failed_claims: failed,
        rows_read: store::rows_read() - rows_at_start,
        ignored_markers: markers.ignored,
    })
}

/// What a turn shows the model, and the record of why.
struct Prompt {
    request: Request,
    sel: Selection,
    prompt_sha256: String,
}

/// How many of the newest messages every prompt carries as chat history (3 exchanges).
pub const HISTORY_MESSAGES: usize = 6;
/// The most characters of history a prompt carries.
pub const HISTORY_CHARS: usize = 6_000;

/// Stage 2: the recent history, what retrieval chose, the context block, the request and
/// its digest (`prompt_sha256`: the canonical JSON of the system prompt and the user's
/// message, and of the history when there is one).
fn build_prompt<R: Reads>(
    r: &R,
    p: &Projections,
    cfg: &RetrievalConfig,
    message: &str,
    user_id: i64,
    opts: &Options,
) -> crate::Result<Prompt> {
    let history = select::history(r, user_id, HISTORY_MESSAGES, HISTORY_CHARS)?;
    let sel: Selection = if cfg.strategy == "hybrid" {
        let exclude = history.iter().map(|e| e.id).collect();
        let budget = opts.budget.unwrap_or(cfg.budget);
        select::select_hybrid(r, p, message, user_id, budget, exclude)?
    } else {
        select::select(r, cfg, message, user_id)?
    };
    let context = render::context_block(p, p.mirror.last_event_id, &sel, message);
    let request = Request {
        system: render::system_prompt(&context),
        user: message.to_string(),
        history: history
            .iter()
            .map(|e| {
                let role = if e.kind == "user_message" {
                    "user"
                } else {
                    "assistant"
                };
                (role.to_string(), e.content.clone())
            })
            .collect(),
        temperature: opts.temperature,
        top_p: opts.top_p,
        seed: opts.seed,
        max_tokens: opts.max_tokens,
        turn: p.graph.count_of("user_message") as u64,
    };
    let mut hashed = json!({"system": request.system, "user": request.user});
    if !request.history.is_empty() {
        hashed["history"] = json!(request.history);
    }
    let prompt_sha256 = {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        h.update(canon::to_string(&hashed).unwrap_or_default());
        format!("{:x}", h.finalize())
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
    let Some((path, id)) = claim::parse_ref(target) else {
        return Ok(());
    };
    let outcome = claim::resolve_ref(Path::new(&path), id);
    let ev = new_event(
        "inter_ledger_ref",
        claim::ref_content(&path, id),
        outcome.meta_map(),
    )?;
    put(batch, p, out, ev, clock)?;
    Ok(())
}
