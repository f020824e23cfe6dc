//! Deep verification (`pmm-verify --deep`, SPEC §4): recompute every *derived* event from its
//! inputs and report those that differ as [`Problem::DerivedMismatch`].
//!
//! A hash chain only proves that nothing changed after the fact; it says nothing about whether
//! what was written was right. Derived events are the ones whose content follows from other
//! data in the ledger, so they can be checked without the model that produced the rest:
//!
//! | event | field | recomputed from | FORMATS.md |
//! |---|---|---|---|
//! | `commitment_open` | `meta.cid` | sha1 of `meta.text` (not for internal `mc_` cids) | §3.2 |
//! | `embedding_add` | whole content | the content of the event it names (hash64) | §9.2 |
//! | `retrieval_selection` | `meta.digest` | its content + the turn's user message (the one its reply's `meta.reply_to` names; without one, the last before the reply) | §9.4 |
//! | `checkpoint_manifest` | `root_hash` | the stored hashes of events `1..=up_to_id` | §8.9 |
//! | `autonomy_stimulus` | `slot_id` (content and meta) | its `slot` | §8.1 |
//! | `autonomy_tick` | `meta.slot_id` | its `meta.slot` | §8.1 |
//! | `summary_update` | `meta.rsm_state` | the self-model over the events before it | §5.2 |
//! | `commitment_close` | content | `Commitment closed: <meta.cid>` (or `Internal commitment closed: …`) | §2 |
//! | `autonomy_tick` | `decision`, `evidence` | one of idle/reflect/summarize; evidence ids before the tick | §8.3 |
//! | `autonomy_rule_table` | content | the four thresholds (and `index_threshold` when not the default), in order, each in the `--set` range | §8.2 |
//! | `checkpoint_manifest` | `covers`, `up_to_id` | `["rsm_state","open_commitments"]`, an id before it | §8.9 |
//! | `meta_summary` | `event_count`, `graph_stats.nodes`, `meta.about_event` | at most the events before it; the sum of `counts_by_kind`; an earlier reflection | §7.2 |
//! | `reflection` (pmm's synthesized) | `intent`, `outcome` | the turn's user message and reply, stripped, 256 chars | §7.1 |
//! | an `index` tick's `concept_*` and `claim_from_text` | kind, content, meta | the indexer's rule (`meta.index_rule`) over its evidence messages and the concept layer before it ([`super::indexed`]) | §14.5 |
//!
//! [`KINDS_NOT_CHECKED`] lists the derived kinds that are not recomputed, and why; `pmm-verify
//! --deep` prints both lists in its summary.
//!
//! The last row is a hook ([`SelfModel`]): the RSM projection lives elsewhere and plugs in.
//!
//! [`DeepChecker`] is a streaming fold like [`crate::chain::Verifier`]: feed it the events in ledger
//! order and memory stays bounded whatever the ledger size. It keeps
//! - the texts of the most recent events an embedding may name (user and assistant messages,
//!   lifetime-memory chunks), up to [`TEXT_WINDOW_EVENTS`] of them and [`TEXT_WINDOW_BYTES`];
//! - the last few user messages (the query of a retrieval digest);
//! - a [`RootHasher`] and its state after each of the last [`ROOT_WINDOW`] events and after
//!   the last few `summary_update`s (the reference checkpoints up to the latest summary); a
//!   root is only finalised when a checkpoint asks for it.
//!
//! Anything out of reach of that state — an embedding of an old or later event, a checkpoint
//! of a distant prefix — is deferred, and settled by a second pass over the same input
//! ([`DeepChecker::second_pass`]), exactly as the chain verifier settles far-pointing links.

use crate::canon;
use crate::chain::root::{RootHasher, RootSnapshot, MANIFEST_COVERS};
use crate::chain::{Digest, Finding, Problem};
use crate::context::{embed, retrieval};
use crate::event::{Action, Event, Kind, Seen, Source};
use crate::formats::slot;
use crate::projection::mirror::{close_content, internal_close_content};
use crate::projection::rsm::synthesized_text;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

mod digest;
mod embedding;
mod roots;
mod rules;
mod self_model;

/// How many embeddable texts (newest first) are kept for embeddings that come later. The
/// reference embeds a message a few events after it, and the kernel's backfill reaches back
/// at most 50 messages.
pub const TEXT_WINDOW_EVENTS: usize = 4096;

/// The most text bytes the embedding window holds; older texts are dropped beyond it.
pub const TEXT_WINDOW_BYTES: usize = 32 << 20;

/// How many recent prefix states are kept (about 120 bytes each).
pub const ROOT_WINDOW: usize = 4096;

/// How many `summary_update` prefix roots are kept, whatever their age.
const SUMMARY_ROOTS: usize = 64;

/// How many recent user messages are kept for retrieval digests.
const USER_WINDOW: usize = 16;

/// How many recent replies are kept with the user message each answers (a turn writes its
/// `retrieval_selection` a few events after its reply, in the same transaction).
const REPLY_WINDOW: usize = 64;

/// The kinds whose content an `embedding_add` may embed in the reference.
const EMBEDDABLE: &[Kind] = &[
    Kind::UserMessage,
    Kind::AssistantMessage,
    Kind::LifetimeMemory,
];

/// The cid of a commitment opened with `text` (FORMATS.md §3.2): the one definition, the
/// Mirror's, which the turn writes with.
pub use crate::projection::mirror::commitment_cid;

/// The self-model check of `summary_update` events: a projection that folds over the ledger
/// and says which `meta.rsm_state` each summary should carry (FORMATS.md §5.2, §7.4).
///
/// The RSM is written elsewhere; this is the seam it plugs into ([`DeepChecker::with_self_model`]).
/// Without one, `summary_update` events are not checked and [`DeepCounts::rsm_snapshots`]
/// stays 0. Memory is the implementation's business: it sees every event once, in order.
pub trait SelfModel: Send {
    /// Sees the next event, after the checker has checked it (so a `summary_update` is
    /// checked against the events before it). Its meta is parsed once for every fold that
    /// reads it ([`Seen::meta`]).
    fn observe(&mut self, seen: &Seen<'_>);

    /// The `rsm_state` that `summary` should carry, given every event observed so far, or
    /// `None` to leave this one unchecked. `meta` and `content` are the summary's, parsed
    /// (`None` when they do not parse; the content names `last_event_id`, the end of the
    /// window the reference looked at).
    fn expected_rsm_state(&mut self, summary: &Event, parsed: Parsed<'_>) -> Option<Value>;

    /// A fast first look: the expected `rsm_state` as the JSON serde_json would write for it,
    /// when the implementation can give it without building a value tree. A `found` value
    /// that serializes to exactly these bytes matches; any other goes through
    /// [`SelfModel::expected_rsm_state`] and the canonical comparison.
    fn expected_rsm_json(&mut self, _summary: &Event, _parsed: Parsed<'_>) -> Option<Vec<u8>> {
        None
    }
}

/// A `summary_update`'s meta and content as the checker parsed them (`None`: they do not).
#[derive(Debug, Clone, Copy)]
pub struct Parsed<'a> {
    /// The meta, parsed as [`Event::meta_map`] parses it.
    pub meta: Option<&'a Map<String, Value>>,
    /// The content.
    pub content: Option<&'a Value>,
}

/// A check of `--deep`: the kind whose events it checks (skipped when the event itself was
/// erased), what it recomputes from what (the summary's `kinds_checked`), whether it reads the
/// event's meta, and the check — `None` where a fold that sees every event checks the kind
/// ([`super::adaptive`]).
struct Check {
    kind: Kind,
    what: &'static str,
    meta: bool,
    run: Option<CheckFn>,
}

/// A check of one event, given its meta when the row asks for it (`None`: it does not parse).
type CheckFn = fn(&mut DeepChecker, &Event, Option<&Map<String, Value>>, &mut Vec<Finding>);

/// Every derived kind `--deep` checks, one row each: which kinds are derived, the summary's
/// [`KINDS_CHECKED`], whose meta is parsed and the dispatch all follow from it.
const CHECKS: &[Check] = &[
    Check { kind: Kind::CommitmentOpen, what: "meta.cid from meta.text", meta: true, run: Some(DeepChecker::check_cid) },
    Check { kind: Kind::CommitmentClose, what: "content from meta.cid", meta: true, run: Some(DeepChecker::check_close) },
    Check { kind: Kind::EmbeddingAdd, what: "the whole content from the embedded event's text", meta: false, run: Some(DeepChecker::check_embedding) },
    Check { kind: Kind::RetrievalSelection, what: "meta.digest from the selection and the user message its reply answers (meta.reply_to)", meta: true, run: Some(DeepChecker::check_digest) },
    Check { kind: Kind::CheckpointManifest, what: "root_hash from the prefix; covers; up_to_id before it", meta: false, run: Some(DeepChecker::check_manifest) },
    Check { kind: Kind::AutonomyStimulus, what: "slot_id (content and meta) from the slot", meta: true, run: Some(DeepChecker::check_stimulus) },
    Check { kind: Kind::AutonomyTick, what: "meta.slot_id from meta.slot; decision is idle, reflect, summarize or index; evidence ids before it", meta: true, run: Some(DeepChecker::check_tick) },
    Check { kind: Kind::AutonomyRuleTable, what: "format: the four thresholds in order (and index_threshold when not the default), each 1 to 1000000000", meta: false, run: Some(DeepChecker::check_rule_table) },
    Check { kind: Kind::SummaryUpdate, what: "meta.rsm_state from the self-model over the events before it", meta: true, run: Some(DeepChecker::check_self_model) },
    Check { kind: Kind::StabilityMetrics, what: "the whole content from the 100 events before it", meta: false, run: None },
    Check { kind: Kind::CoherenceCheck, what: "the whole content from the claims before it", meta: false, run: None },
    Check { kind: Kind::PolicyUpdate, what: "the whole content from the outcomes before it (pmm's batches and thresholds when it lists evidence, else the reference's rates)", meta: false, run: None },
    Check { kind: Kind::MetaPolicyUpdate, what: "the whole content from the policy_updates, stability and thresholds before it", meta: false, run: None },
    Check { kind: Kind::OutcomeObservation, what: "action_kind names the decision of the tick before it", meta: false, run: None },
    Check { kind: Kind::MetaSummary, what: "event_count not above the events before it; graph_stats.nodes is the sum of counts_by_kind; meta.about_event an earlier reflection", meta: true, run: Some(DeepChecker::check_meta_summary) },
    Check { kind: Kind::Reflection, what: "pmm's synthesized ones (meta.source pmm-turn): intent and outcome from the turn's user message and reply", meta: true, run: Some(DeepChecker::check_synthesized) },
];

/// What `--deep` checks besides [`CHECKS`]: the events of index ticks ([`super::indexed`])
/// and the prompts of replies ([`super::prompts`]), each checked by its own fold.
const CHECKED_ELSEWHERE: [(&str, &str); 2] = [
    ("concept_define, concept_bind_async, concept_bind_thread, concept_relate, claim_from_text (an index tick's)", "each event, kind, content and meta, from the indexer's rule the tick names (meta.index_rule, 1 when absent) over its evidence messages and the concept layer before it"),
    (Kind::AssistantMessage.as_str(), "meta.prompt_sha256 from the prompt rebuilt from the ledger (a ledger file, replies of the current prompt format; the summary's prompts)"),
];

/// The derived kinds `--deep` recomputes (what of each), for the summary's `kinds_checked`:
/// one row per derived kind (the checker's table of checks), then what is checked elsewhere.
pub const KINDS_CHECKED: &[(&str, &str)] = &kinds_checked();

const fn kinds_checked() -> [(&'static str, &'static str); CHECKS.len() + CHECKED_ELSEWHERE.len()] {
    let mut out = [("", ""); CHECKS.len() + CHECKED_ELSEWHERE.len()];
    let mut i = 0;
    while i < CHECKS.len() {
        out[i] = (CHECKS[i].kind.as_str(), CHECKS[i].what);
        i += 1;
    }
    let mut j = 0;
    while j < CHECKED_ELSEWHERE.len() {
        out[i + j] = CHECKED_ELSEWHERE[j];
        j += 1;
    }
    out
}

/// The row of [`CHECKS`] for events of `kind`: `None` when the kind is not derived.
fn check_of(kind: &Kind) -> Option<&'static Check> {
    CHECKS.iter().find(|c| c.kind == *kind)
}

/// The derived kinds `--deep` does not recompute, and why (the summary's `kinds_not_checked`).
pub const KINDS_NOT_CHECKED: &[(&str, &str)] = &[
    (Kind::MetricsTurn.as_str(), "latency and token counts are measurements of the model call, not derived from the ledger"),
    (Kind::Reflection.as_str(), "the reference's synthesized reflections, kernel and delta reflections depend on the kernel's whole state (their delta_hash and rules are not refolded); a synthesized reflection's internal_goals and self_model parts are not checked"),
    (Kind::MetaSummary.as_str(), "graph_stats counts and patterns are not refolded; the reference's event_count is not the id before it, so only its bound is checked"),
    (Kind::AutonomyTick.as_str(), "whether the decision is the one the kernel would take is not refolded (the adaptive thresholds at that slot)"),
    (Kind::AutonomyRuleTable.as_str(), "the values are not refolded: the reference's adaptive loop changes them without a config event"),
    (Kind::LifetimeMemory.as_str(), "chunk text is not refolded"),
    ("concept_define, concept_bind_event, concept_bind_thread (a turn's)", "pmm's turns write them for the concepts a reply names and the user's text mentions: which concepts a turn is about is the model's choice, not derived"),
    ("concept_alias, concept_relate (other than an index tick's), autonomy_metrics", "written by the reference's engines, which pmm does not reimplement"),
    (Kind::OutcomeObservation.as_str(), "only action_kind is checked: observed_result and evidence depend on what the tick wrote, which the reference judged differently (an idle tick is success there)"),
];

/// How many derived values were checked, by kind, and what came of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DeepCounts {
    /// `commitment_open` cids recomputed (internal `mc_` cids are not derived from text).
    pub cids: u64,
    /// `embedding_add` contents recomputed.
    pub embeddings: u64,
    /// `retrieval_selection` digests recomputed.
    pub retrieval_digests: u64,
    /// `checkpoint_manifest` roots recomputed.
    pub checkpoint_roots: u64,
    /// `autonomy_stimulus` slot ids recomputed.
    pub slot_ids: u64,
    /// `autonomy_tick` slot ids recomputed.
    pub tick_slot_ids: u64,
    /// `summary_update` self-model snapshots compared (only with a [`SelfModel`]).
    pub rsm_snapshots: u64,
    /// `commitment_close` contents recomputed from their cid.
    pub close_contents: u64,
    /// `autonomy_tick` decisions and evidence checked.
    pub tick_decisions: u64,
    /// `autonomy_rule_table` contents checked.
    pub rule_tables: u64,
    /// `checkpoint_manifest` covers and up_to_id checked.
    pub manifest_covers: u64,
    /// `meta_summary` event counts and subjects checked.
    pub meta_summaries: u64,
    /// Synthesized reflections (`intent`/`outcome`) recomputed.
    pub synthesized_reflections: u64,
    /// The events of `index` ticks recomputed with the indexer's rule ([`super::indexed`]).
    pub index_events: u64,
    /// `outcome_observation`, `stability_metrics`, `coherence_check`, `policy_update` and
    /// `meta_policy_update` events recomputed ([`super::adaptive`]).
    pub adaptive_events: u64,
    /// Of those, the ones equal to the newest one of their kind before them: the reference's
    /// re-emissions (§17 item 17; pmm writes none).
    pub adaptive_repeats: u64,
    /// Goals that stay open (`commitment_open` with `meta.cause`) recomputed
    /// ([`super::goals`]). Left out when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub open_goals: u64,
    /// Retention erasures whose rule, cutoff, kind and age were recomputed
    /// ([`super::retention`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub retention_erasures: u64,
    /// `derived_mismatch` findings reported.
    pub mismatches: u64,
    /// Derived values that could not be checked: the input they need is not in the ledger or
    /// was out of reach and no second pass was made (stdin), or the event is too malformed to
    /// say what it derives from.
    pub unresolved: u64,
    /// Derived values not checked because an input (or the event itself) was erased
    /// (`pmm-append --erase`): its text is gone, so what it derived cannot be recomputed.
    pub skipped_erased: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A derived check skipped because an input was erased.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedForErasure {
    /// The derived event.
    pub id: i64,
    /// What would have been recomputed.
    pub check: String,
    /// The erased event it derives from.
    pub erased_input: i64,
}

/// How many skipped checks the summary lists one by one (all are counted).
const SKIPPED_LISTED: usize = 100;

/// An embedding whose source text was out of the window.
struct PendingEmbedding {
    id: i64,
    target: i64,
    model: String,
    dims: i64,
    found: String,
}

/// A checkpoint whose prefix root was out of the window.
struct PendingRoot {
    id: i64,
    up_to: i64,
    found: Value,
}

/// The streaming deep checker. See the module docs.
pub struct DeepChecker {
    counts: DeepCounts,
    texts: VecDeque<(i64, String)>,
    text_bytes: usize,
    users: VecDeque<(i64, String)>,
    hasher: RootHasher,
    roots: VecDeque<(i64, RootSnapshot)>,
    /// True while `roots` still holds every event since the start.
    roots_complete: bool,
    summary_roots: VecDeque<(i64, RootSnapshot)>,
    pending_embeddings: Vec<PendingEmbedding>,
    pending_roots: Vec<PendingRoot>,
    self_model: Option<Box<dyn SelfModel>>,
    /// The newest user message and reply (the inputs of a synthesized reflection).
    last_user: Option<String>,
    last_reply: Option<String>,
    /// Reflection ids seen (the subjects a meta_summary may name), newest last.
    reflections: VecDeque<i64>,
    /// The newest replies and the user message each answers (`meta.reply_to`; `None` for a
    /// reply that does not say, such as the reference's), newest last.
    replies: VecDeque<(i64, Option<i64>)>,
    /// The ids of `last_user` and `last_reply`.
    last_user_id: i64,
    last_reply_id: i64,
    /// Events in the erased form seen so far (the verifier settles whether an erasure names
    /// them; one that none names is a hash mismatch, so skipping its dependants hides nothing).
    erased: std::collections::BTreeSet<i64>,
    /// The first skipped checks, listed in the summary.
    skipped: Vec<SkippedForErasure>,
    /// The adaptive loop's events, recomputed.
    adaptive: super::adaptive::AdaptiveCheck,
    /// The indexer's events, recomputed.
    index: super::indexed::IndexCheck,
    /// The goals that stay open, recomputed.
    goals: super::goals::GoalCheck,
    /// The retention erasures, recomputed.
    retention: super::retention::RetentionCheck,
}

impl Default for DeepChecker {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for DeepChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeepChecker")
            .field("counts", &self.counts)
            .field("pending_embeddings", &self.pending_embeddings.len())
            .field("pending_roots", &self.pending_roots.len())
            .field("self_model", &self.self_model.is_some())
            .finish()
    }
}

/// What a second pass over the input must look up for the deferred checks, and what it found.
pub struct DeepSecondPass {
    texts_wanted: HashSet<i64>,
    texts: HashMap<i64, String>,
    roots_wanted: BTreeMap<i64, Option<Digest>>,
    hasher: RootHasher,
    embeddings: Vec<PendingEmbedding>,
    roots: Vec<PendingRoot>,
    fed: bool,
}

impl DeepSecondPass {
    /// Feed every event of the input again, in order.
    pub fn see(&mut self, ev: &Event) {
        self.fed = true;
        // Roots of prefixes that end before this event.
        let done: Vec<i64> = self
            .roots_wanted
            .range(..ev.id)
            .filter(|(_, d)| d.is_none())
            .map(|(k, _)| *k)
            .collect();
        if !done.is_empty() {
            let root = self.hasher.root();
            for k in done {
                self.roots_wanted.insert(k, Some(root));
            }
        }
        self.hasher.push(ev.hash.as_deref());
        if self.texts_wanted.contains(&ev.id) {
            self.texts
                .entry(ev.id)
                .or_insert_with(|| ev.content.clone());
        }
    }

    /// The event ids whose content the pass is looking for (for callers that can fetch events
    /// by id instead of rereading everything, e.g. from SQLite). Feed those events to
    /// [`DeepSecondPass::see`].
    pub fn wanted_texts(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self.texts_wanted.iter().copied().collect();
        v.sort_unstable();
        v
    }

    /// True if some deferred check needs prefix roots, which only a full pass in order gives.
    pub fn needs_full_pass(&self) -> bool {
        !self.roots_wanted.is_empty()
    }
}

/// What a `retrieval_selection`'s digest is recomputed from, read straight into fields (no
/// value tree: the lists hold a number per selected event). Content this does not read (odd
/// types, repeated keys) or a zero score (`-0` must keep its sign, which an integer read
/// loses) goes the general way, through a `Value`, which says the same of every content
/// this reads.
#[derive(serde::Deserialize)]
struct DigestInputs {
    dims: i64,
    model: String,
    turn_id: i64,
    scores: Vec<f64>,
    selected: Vec<i64>,
}

/// What an `embedding_add` names, read straight into fields (the vector is skipped, not
/// parsed number by number); other content goes through a `Value`, as [`DigestInputs`].
#[derive(serde::Deserialize)]
struct EmbeddingFields {
    event_id: i64,
    model: String,
    dims: i64,
}

fn mismatch(what: impl Into<String>, expected: Value, found: Value) -> Problem {
    Problem::DerivedMismatch {
        what: what.into(),
        expected,
        found,
    }
}

fn canon_text(v: &Value) -> String {
    canon::to_string(v).unwrap_or_else(|_| v.to_string())
}

impl DeepChecker {
    /// A checker with no self-model hook.
    pub fn new() -> Self {
        DeepChecker {
            counts: DeepCounts::default(),
            texts: VecDeque::new(),
            text_bytes: 0,
            users: VecDeque::with_capacity(USER_WINDOW),
            hasher: RootHasher::new(),
            roots: VecDeque::new(),
            roots_complete: true,
            summary_roots: VecDeque::with_capacity(SUMMARY_ROOTS),
            pending_embeddings: Vec::new(),
            pending_roots: Vec::new(),
            self_model: None,
            last_user: None,
            last_reply: None,
            reflections: VecDeque::new(),
            replies: VecDeque::with_capacity(REPLY_WINDOW),
            last_user_id: 0,
            last_reply_id: 0,
            erased: Default::default(),
            skipped: Vec::new(),
            adaptive: Default::default(),
            index: Default::default(),
            goals: Default::default(),
            retention: Default::default(),
        }
    }

    /// Checks the next event like [`DeepChecker::check`], knowing whether it is in the erased
    /// form ([`crate::chain::Verifier::last_erased`]): an erased event's own derived values
    /// are not checked, nor anything later derived from its text; it still counts by its id
    /// and kind wherever the writer counted it (the adaptive windows, checkpoint prefixes).
    /// `meta` is the event's meta when the reader parsed it (`None`: parsed here if needed).
    pub fn check_event(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        erased: bool,
        out: &mut Vec<Finding>,
    ) {
        if erased {
            self.erased.insert(ev.id);
            self.retention.erased(ev);
            if check_of(&ev.kind).is_some() {
                self.skip(ev.id, ev.kind.as_str(), ev.id);
            }
            // It still counts in the adaptive windows by its id and kind, as it did for the
            // writer: only its text is gone.
            self.goals.fold_erased(ev);
            self.adaptive.fold_erased(ev);
            let verdicts = self.index.erased(ev);
            self.index_verdicts(verdicts, out);
            self.remember(&Seen::new(ev));
            return;
        }
        self.check_parsed(ev, meta, out);
    }

    /// The checks skipped because an input was erased (the first `SKIPPED_LISTED`).
    pub fn skipped(&self) -> &[SkippedForErasure] {
        &self.skipped
    }

    fn skip(&mut self, id: i64, check: &str, erased_input: i64) {
        self.counts.skipped_erased += 1;
        if self.skipped.len() < SKIPPED_LISTED {
            self.skipped.push(SkippedForErasure {
                id,
                check: check.to_string(),
                erased_input,
            });
        }
    }

    /// Also checks `summary_update` self-model snapshots with `model`.
    pub fn with_self_model(mut self, model: Box<dyn SelfModel>) -> Self {
        self.self_model = Some(model);
        self
    }

    /// What has been checked so far.
    pub fn checked(&self) -> DeepCounts {
        self.counts
    }

    fn emit(&mut self, out: &mut Vec<Finding>, id: i64, p: Problem) {
        self.counts.mismatches += 1;
        out.push(Finding::new(Some(id), p));
    }

    /// Checks the next event (in ledger order), appending any findings to `out`.
    pub fn check(&mut self, ev: &Event, out: &mut Vec<Finding>) {
        self.check_parsed(ev, None, out);
    }

    /// [`DeepChecker::check`] with the meta already parsed (readers often have it); `None`
    /// parses the stored text where a check needs it.
    pub fn check_parsed(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        // Every fold below reads the meta from here: it is parsed at most once per event.
        let seen = Seen::with_meta(ev, meta);
        if let Some(c) = check_of(&ev.kind) {
            if let Some(run) = c.run {
                run(self, ev, c.meta.then(|| seen.meta()).flatten(), out);
            }
        }
        self.check_adaptive(&seen, out);
        self.check_index(&seen, out);
        for (what, expected, found) in self.retention.check(&seen) {
            self.emit(out, ev.id, mismatch(what, expected, found));
        }
        self.counts.retention_erasures = self.retention.checked;
        self.remember(&seen);
    }

    /// The indexer's events ([`super::indexed`]); every event is folded in.
    fn check_index(&mut self, s: &Seen<'_>, out: &mut Vec<Finding>) {
        let (texts, erased) = (&self.texts, &self.erased);
        let text = |id: i64| {
            let i = texts.binary_search_by_key(&id, |(k, _)| *k).ok()?;
            texts.get(i).map(|(_, t)| t.clone())
        };
        let verdicts = self.index.check(s, &text, &|id| erased.contains(&id));
        self.index_verdicts(verdicts, out);
    }

    fn index_verdicts(
        &mut self,
        verdicts: Vec<super::indexed::IndexVerdict>,
        out: &mut Vec<Finding>,
    ) {
        use super::indexed::IndexVerdict;
        for v in verdicts {
            match v {
                IndexVerdict::None => {}
                IndexVerdict::Same => self.counts.index_events += 1,
                IndexVerdict::Differs(id, what, expected, found) => {
                    self.counts.index_events += 1;
                    self.emit(out, id, mismatch(what, expected, found));
                }
                IndexVerdict::Unresolved => self.counts.unresolved += 1,
                IndexVerdict::Erased(tick, input) => self.skip(tick, "autonomy_tick.index", input),
            }
        }
    }

    /// The adaptive loop's events ([`super::adaptive`]); every event is folded in.
    fn check_adaptive(&mut self, s: &Seen<'_>, out: &mut Vec<Finding>) {
        let ev = s.ev;
        self.check_goal(s, out);
        use super::adaptive::AdaptiveVerdict;
        match self.adaptive.check_seen(s) {
            AdaptiveVerdict::NotChecked => {}
            AdaptiveVerdict::Same { repeat } => {
                self.counts.adaptive_events += 1;
                self.counts.adaptive_repeats += u64::from(repeat);
            }
            AdaptiveVerdict::Differs(what, expected) => {
                self.counts.adaptive_events += 1;
                let expected = expected.map_or(Value::Null, Value::String);
                let found = Value::String(ev.content.clone());
                self.emit(out, ev.id, mismatch(what, expected, found));
            }
            AdaptiveVerdict::Erased(what, erased) => self.skip(ev.id, what, erased),
        }
    }

    /// A goal that stays open ([`super::goals`]), against the mirror before `ev`.
    fn check_goal(&mut self, s: &Seen<'_>, out: &mut Vec<Finding>) {
        let ev = s.ev;
        use super::goals::GoalVerdict;
        match self.goals.check_seen(s, self.adaptive.mirror()) {
            GoalVerdict::NotChecked => {}
            GoalVerdict::Same => self.counts.open_goals += 1,
            GoalVerdict::Differs(expected, found) => {
                self.counts.open_goals += 1;
                let p = mismatch("commitment_open.goal", expected, found);
                self.emit(out, ev.id, p);
            }
            GoalVerdict::Erased(erased) => self.skip(ev.id, "commitment_open.goal", erased),
        }
    }

    /// Updates the state with an event once it has been checked.
    fn remember(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        self.hasher.push(ev.hash.as_deref());
        let root = self.hasher.snapshot();
        if self.roots.len() == ROOT_WINDOW {
            self.roots.pop_front();
            self.roots_complete = false;
        }
        self.roots.push_back((ev.id, root.clone()));
        match ev.kind {
            Kind::SummaryUpdate => {
                if self.summary_roots.len() == SUMMARY_ROOTS {
                    self.summary_roots.pop_front();
                }
                self.summary_roots.push_back((ev.id, root));
            }
            Kind::AssistantMessage => {
                self.last_reply = Some(ev.content.clone());
                self.last_reply_id = ev.id;
                if self.replies.len() == REPLY_WINDOW {
                    self.replies.pop_front();
                }
                self.replies.push_back((ev.id, reply_to(s)));
            }
            Kind::Reflection => {
                if self.reflections.len() == ROOT_WINDOW {
                    self.reflections.pop_front();
                }
                self.reflections.push_back(ev.id);
            }
            Kind::UserMessage => {
                self.last_user = Some(ev.content.clone());
                self.last_user_id = ev.id;
                if self.users.len() == USER_WINDOW {
                    self.users.pop_front();
                }
                self.users.push_back((ev.id, ev.content.clone()));
            }
            _ => {}
        }
        if EMBEDDABLE.contains(&ev.kind) {
            self.texts.push_back((ev.id, ev.content.clone()));
            self.text_bytes += ev.content.len();
            while self.texts.len() > TEXT_WINDOW_EVENTS
                || (self.text_bytes > TEXT_WINDOW_BYTES && self.texts.len() > 1)
            {
                if let Some((_, t)) = self.texts.pop_front() {
                    self.text_bytes -= t.len();
                }
            }
        }
        if let Some(m) = self.self_model.as_mut() {
            m.observe(s);
        }
    }

    /// After the last event: what a second pass over the same input must settle, if anything
    /// (embeddings of texts out of the window, checkpoints of prefixes out of it). `None` when
    /// everything was checked in the first pass.
    pub fn second_pass(&mut self) -> Option<DeepSecondPass> {
        if self.pending_embeddings.is_empty() && self.pending_roots.is_empty() {
            return None;
        }
        let embeddings = std::mem::take(&mut self.pending_embeddings);
        let roots = std::mem::take(&mut self.pending_roots);
        Some(DeepSecondPass {
            texts_wanted: embeddings.iter().map(|p| p.target).collect(),
            texts: HashMap::new(),
            roots_wanted: roots.iter().map(|p| (p.up_to, None)).collect(),
            hasher: RootHasher::new(),
            embeddings,
            roots,
            fed: false,
        })
    }

    /// Turns what the second pass found into findings. A pass that was never fed (the input
    /// could not be read twice) settles nothing: its checks count as unresolved. An embedding
    /// whose event is not in the ledger at all is reported as `embedding_add.event_id`
    /// (expected null: there is no such event to embed).
    pub fn settle(&mut self, mut pass: DeepSecondPass, out: &mut Vec<Finding>) {
        if !pass.fed && pass.texts.is_empty() {
            self.counts.unresolved += (pass.embeddings.len() + pass.roots.len()) as u64;
            return;
        }
        // Prefixes that end at or after the last event.
        let last = pass.hasher.root();
        for d in pass.roots_wanted.values_mut() {
            d.get_or_insert(last);
        }
        let mut found_all = Vec::new();
        for p in pass.embeddings {
            if self.erased.contains(&p.target) {
                self.skip(p.id, "embedding_add", p.target);
                continue;
            }
            match pass.texts.get(&p.target) {
                Some(text) => {
                    self.counts.embeddings += 1;
                    let expected = embed::embedding_content(p.target, text, &p.model, p.dims);
                    found_all.push((p.id, Some((expected, p.found)), None));
                }
                None if pass.fed => {
                    self.counts.embeddings += 1;
                    let problem = mismatch("embedding_add.event_id", Value::Null, p.target.into());
                    found_all.push((p.id, None, Some(problem)));
                }
                None => self.counts.unresolved += 1,
            }
        }
        for p in pass.roots {
            match pass.roots_wanted.get(&p.up_to).copied().flatten() {
                Some(root) if pass.fed => {
                    self.counts.checkpoint_roots += 1;
                    let expected = root.to_string();
                    if p.found.as_str() != Some(expected.as_str()) {
                        let problem =
                            mismatch("checkpoint_manifest.root_hash", expected.into(), p.found);
                        found_all.push((p.id, None, Some(problem)));
                    }
                }
                _ => self.counts.unresolved += 1,
            }
        }
        found_all.sort_by_key(|(id, _, _)| *id);
        for (id, compare, problem) in found_all {
            if let Some((expected, found)) = compare {
                self.compare_embedding(out, id, &expected, &found);
            }
            if let Some(p) = problem {
                self.emit(out, id, p);
            }
        }
    }

    /// Closes the run and returns the counts. Checks still deferred (no second pass was made)
    /// count as unresolved. Call [`DeepChecker::settle`] first if there was a second pass.
    /// `out` mirrors [`crate::chain::Verifier::finish`]: nothing is reported here today, but checks
    /// that can only conclude at the end (the self-model's, perhaps) will report through it.
    pub fn finish(mut self) -> DeepCounts {
        self.counts.unresolved += (self.pending_embeddings.len() + self.pending_roots.len()) as u64;
        self.counts
    }
}

/// The user message a reply answers (`meta.reply_to`; the meta is read only when its text
/// names the key at all).
fn reply_to(s: &Seen<'_>) -> Option<i64> {
    if !s.ev.meta.contains("\"reply_to\"") {
        return None;
    }
    s.meta()?.get("reply_to").and_then(Value::as_i64)
}

/// The slot id a stimulus or tick should carry: the reference's epoch and interval, or the
/// interval `pmm-tick --interval` recorded in `meta.interval`.
fn slot_id_of(n: i64, meta: Option<&Map<String, Value>>) -> String {
    match meta.and_then(|m| m.get("interval")).and_then(Value::as_i64) {
        Some(interval) => slot::slot_id(slot::EPOCH, interval, n),
        None => slot::reference_slot_id(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::event_digest;

    /// A chained list of events from (kind, content, meta) triples.
    fn ledger(items: &[(&str, String, &str)]) -> Vec<Event> {
        let mut out: Vec<Event> = Vec::new();
        let mut scratch = Vec::new();
        for (i, (kind, content, meta)) in items.iter().enumerate() {
            let prev = out.last().and_then(|e| e.hash.clone());
            let m = canon::parse_meta(meta).unwrap();
            let d = event_digest(&mut scratch, kind, content, &m, prev.as_deref()).unwrap();
            out.push(Event {
                id: i as i64 + 1,
                ts: "2025-11-24T05:55:41.199145Z".into(),
                kind: (*kind).into(),
                content: content.clone(),
                meta: canon::to_string(&Value::Object(m)).unwrap(),
                prev_hash: prev,
                hash: Some(d.to_string()),
            });
        }
        out
    }

    fn run(events: &[Event]) -> (Vec<Finding>, DeepCounts) {
        let mut c = DeepChecker::new();
        let mut out = Vec::new();
        for ev in events {
            c.check(ev, &mut out);
        }
        if let Some(mut pass) = c.second_pass() {
            for ev in events {
                pass.see(ev);
            }
            c.settle(pass, &mut out);
        }
        let counts = c.finish();
        (out, counts)
    }

    fn whats(f: &[Finding]) -> Vec<(i64, String)> {
        f.iter()
            .map(|f| match &f.problem {
                Problem::DerivedMismatch { what, .. } => (f.id.unwrap_or(0), what.clone()),
                p => panic!("unexpected {p:?}"),
            })
            .collect()
    }

    #[test]
    fn cid_worked_examples() {
        assert_eq!(commitment_cid("engage_with_PMM_creator_tests"), "e86ccfd1");
        assert_eq!(commitment_cid("note this item"), "e2eb5791");
    }

    fn sample() -> Vec<Event> {
        let sid = slot::reference_slot_id(200854);
        let user = "hello there";
        let digest = retrieval::selection_digest(64, "hash64", user, &[0.0], &[1]);
        ledger(&[
            ("user_message", user.into(), r#"{"role":"user"}"#),
            ("embedding_add", embed::embedding_content(1, user, "hash64", 64), "{}"),
            ("assistant_message", "hi".into(), r#"{"role":"assistant"}"#),
            (
                "retrieval_selection",
                r#"{"dims":64,"model":"hash64","scores":[0.0],"selected":[1],"strategy":"vector","turn_id":3}"#.into(),
                &format!(r#"{{"digest":"{digest}"}}"#),
            ),
            (
                "commitment_open",
                "Commitment opened: engage_with_PMM_creator_tests".into(),
                r#"{"cid":"e86ccfd1","origin":"assistant","source":"assistant","text":"engage_with_PMM_creator_tests"}"#,
            ),
            (
                "commitment_open",
                "Internal commitment opened: x".into(),
                r#"{"cid":"mc_000006","goal":"x","origin":"autonomy_kernel"}"#,
            ),
            (
                "autonomy_stimulus",
                format!(r#"{{"slot": 200854, "slot_id": "{sid}"}}"#),
                &format!(r#"{{"slot_id":"{sid}","source":"autonomy_supervisor"}}"#),
            ),
            (
                "autonomy_tick",
                r#"{"decision":"idle","evidence":[],"reasoning":"x"}"#.into(),
                &format!(r#"{{"slot":200854,"slot_id":"{sid}","source":"autonomy_kernel"}}"#),
            ),
            ("summary_update", "{}".into(), "{}"),
        ])
    }

    fn with_manifest(mut events: Vec<Event>, up_to: i64, root: &str) -> Vec<Event> {
        let items: Vec<(String, String, String)> = events
            .drain(..)
            .map(|e| (e.kind.to_string(), e.content, e.meta))
            .chain([(
                "checkpoint_manifest".to_string(),
                format!(
                    r#"{{"covers":["rsm_state","open_commitments"],"root_hash":"{root}","up_to_id":{up_to}}}"#
                ),
                r#"{"source":"autonomy_kernel"}"#.to_string(),
            )])
            .collect();
        let refs: Vec<(&str, String, &str)> = items
            .iter()
            .map(|(k, c, m)| (k.as_str(), c.clone(), m.as_str()))
            .collect();
        ledger(&refs)
    }

    #[test]
    fn a_consistent_ledger_has_no_mismatch() {
        let base = sample();
        let root = crate::chain::root::root_hash(base.iter().map(|e| e.hash.as_deref()));
        let events = with_manifest(base, 9, &root.to_string());
        let (f, counts) = run(&events);
        assert!(f.is_empty(), "{f:?}");
        assert_eq!(
            counts,
            DeepCounts {
                cids: 1,
                embeddings: 1,
                retrieval_digests: 1,
                checkpoint_roots: 1,
                slot_ids: 1,
                tick_slot_ids: 1,
                tick_decisions: 1,
                manifest_covers: 1,
                ..DeepCounts::default()
            }
        );
    }

    #[test]
    fn each_tampered_value_is_one_finding() {
        let mut events = with_manifest(sample(), 9, &"0".repeat(64));
        events[1].content = events[1]
            .content
            .replacen("\"vector\":[", "\"vector\":[0,", 1);
        events[3].meta = events[3].meta.replace("\"digest\":\"", "\"digest\":\"0");
        events[4].meta = events[4].meta.replace("e86ccfd1", "e86ccfd2");
        events[6].content = events[6]
            .content
            .replace("\"slot\": 200854", "\"slot\": 200855");
        events[7].meta = events[7].meta.replace("200854", "200853");
        let (f, counts) = run(&events);
        assert_eq!(
            whats(&f),
            vec![
                (2, "embedding_add.vector".to_string()),
                (4, "retrieval_selection.digest".into()),
                (5, "commitment_open.cid".into()),
                (7, "autonomy_stimulus.slot_id".into()),
                (7, "autonomy_stimulus.meta.slot_id".into()),
                (8, "autonomy_tick.meta.slot_id".into()),
                (10, "checkpoint_manifest.root_hash".into()),
            ]
        );
        assert_eq!(counts.mismatches, 7);
    }

    #[test]
    fn out_of_window_inputs_are_settled_by_a_second_pass() {
        // An embedding of a later event and a checkpoint of a later prefix: deferred.
        let text = "later text";
        let mut items = vec![(
            "embedding_add",
            embed::embedding_content(2, text, "hash64", 64),
            "{}",
        )];
        items.push(("user_message", text.into(), "{}"));
        items.push((
            "embedding_add",
            embed::embedding_content(99, "x", "hash64", 64),
            "{}",
        ));
        let events = ledger(&items);
        let (f, counts) = run(&events);
        assert_eq!(whats(&f), vec![(3, "embedding_add.event_id".to_string())]);
        assert_eq!(counts.embeddings, 2);
        assert_eq!(counts.unresolved, 0);

        // Without a second pass they stay unresolved, with no finding.
        let mut c = DeepChecker::new();
        let mut out = Vec::new();
        for ev in &events {
            c.check(ev, &mut out);
        }
        let pass = c.second_pass().unwrap();
        assert_eq!(pass.wanted_texts(), vec![2, 99]);
        c.settle(pass, &mut out);
        let counts = c.finish();
        assert!(out.is_empty());
        assert_eq!((counts.embeddings, counts.unresolved), (0, 2));
    }

    #[test]
    fn checkpoint_roots_beyond_the_window_are_deferred() {
        let mut items: Vec<(&str, String, &str)> = (0..ROOT_WINDOW + 10)
            .map(|i| ("test_event", format!("e{i}"), "{}"))
            .collect();
        items.push(("test_event", "last".into(), "{}"));
        let base = ledger(&items);
        let root = crate::chain::root::root_hash(base[..3].iter().map(|e| e.hash.as_deref()));
        let events = with_manifest(base, 3, &root.to_string());
        let mut c = DeepChecker::new();
        let mut out = Vec::new();
        for ev in &events {
            c.check(ev, &mut out);
        }
        assert_eq!(c.checked().checkpoint_roots, 0);
        let mut pass = c.second_pass().unwrap();
        assert!(pass.needs_full_pass());
        for ev in &events {
            pass.see(ev);
        }
        c.settle(pass, &mut out);
        let counts = c.finish();
        assert!(out.is_empty(), "{out:?}");
        assert_eq!((counts.checkpoint_roots, counts.unresolved), (1, 0));
    }

    struct Fixed(Value, usize);
    impl SelfModel for Fixed {
        fn observe(&mut self, _seen: &Seen<'_>) {
            self.1 += 1;
        }
        fn expected_rsm_state(&mut self, _s: &Event, _p: Parsed<'_>) -> Option<Value> {
            let mut v = self.0.clone();
            v["seen"] = self.1.into();
            Some(v)
        }
    }

    #[test]
    fn self_model_hook_checks_summaries_against_the_events_before_them() {
        let events = ledger(&[
            ("test_event", "a".into(), "{}"),
            (
                "summary_update",
                "{}".into(),
                r#"{"rsm_state":{"seen":1},"synth":"pmm"}"#,
            ),
            (
                "summary_update",
                "{}".into(),
                r#"{"rsm_state":{"seen":1},"synth":"pmm"}"#,
            ),
        ]);
        let mut c = DeepChecker::new().with_self_model(Box::new(Fixed(serde_json::json!({}), 0)));
        let mut out = Vec::new();
        for ev in &events {
            c.check(ev, &mut out);
        }
        let counts = c.finish();
        assert_eq!(counts.rsm_snapshots, 2);
        assert_eq!(
            whats(&out),
            vec![(3, "summary_update.rsm_state".to_string())]
        );
    }
}
