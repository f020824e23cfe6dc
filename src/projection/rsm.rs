//! The Recursive Self-Model (FORMATS.md §5.2): behavioural tendencies, knowledge gaps,
//! interaction meta-patterns and reflection intents, folded from events in id order. Its
//! [`Rsm::snapshot`] is what the reference writes into every `summary_update` as
//! `meta.rsm_state`; a fold over the events before such a summary reproduces that value exactly
//! (checked on all fifteen summaries of the GPT-5.1 ledger).
//!
//! Every quirk of the reference is kept, because the snapshots are stored in ledgers and
//! compared across implementations:
//! - markers are counted with Python's `str.count` (non-overlapping, left to right) and summed,
//!   so "adaptability" counts twice for `adaptability_emphasis` (`adaptability` + `adapt`) and
//!   every "identity" counts for `instantiation_capacity` (it contains `entity`);
//! - counters are capped at 50 after each event; a key appears only once it was incremented;
//! - `uniqueness_emphasis` = `min(20, int(distinct 8-char hash prefixes / events * 10))`,
//!   recomputed after every event (so 10 on any real ledger);
//! - knowledge gaps count only inside a window of the last 500 folded events, and a topic is a
//!   gap once its count exceeds 3; the snapshot's `intents` is that per-topic count map;
//! - reflection intents are appended forever (full user texts included), as the reference does.
//!
//! The reference's `rebuild()` replaces the uniqueness set and total with those of the whole
//! ledger even when it replays a prefix. That never reaches a snapshot: `uniqueness_emphasis` is
//! only recomputed while observing an event, and after a prefix rebuild (`diff_rsm`) nothing
//! more is observed. The summaries were computed live, over the ledger as it then was, which is
//! the prefix. So a plain fold over events `< S` is the right reading, and it matches the
//! fixture; there is no whole-ledger state here. (On the GPT-5.1 fixture the two readings cannot
//! be told apart anyway: its 1199 hashes have distinct prefixes, so the score is 10 either way.)
//!
//! Lowercasing uses Rust's `str::to_lowercase`, which, like Python's `str.lower`, applies the
//! full Unicode mappings including `İ` → `i̇` and the final-sigma rule. They can differ only
//! where the two Unicode tables differ in version, and no such difference can create or remove
//! an ASCII marker (the only characters that lowercase into ASCII letters are `A`-`Z`, `K`
//! KELVIN SIGN and `İ`, mapped the same in both). Stripping uses Python's whitespace set.
//! JSON is parsed with `serde_json`, which rejects `NaN`/`Infinity` and lone surrogates that
//! CPython accepts; a reflection holding those loses its intent here.
//!
//! Memory: bounded except for what the reference keeps without bound, the reflection intents.
//! The reference also keeps every event's 8-hex hash prefix, only to compute
//! `uniqueness_emphasis = int(distinct / events * 10)`. That value is 10 until the first
//! repeated prefix and 9 after it for as long as repeats stay under a tenth of the events —
//! with distinct sha256 hashes, 32-bit prefixes repeat about n²/2³³ times, so for any ledger
//! under about 8·10⁸ events. So we keep the prefixes exactly only until at least
//! [`FREEZE_PREFIXES_AFTER`] events have been folded and a prefix has repeated, then drop the
//! set and count every later prefix as new: the score is exact below that bound, memory and
//! checkpoints stay small (a checkpoint of a 10⁶-event ledger would otherwise carry 4 MB of
//! prefixes), and the first thousand events — every hand-made ledger — stay exact always.

use super::concepts::ConceptGraph;
use crate::event::{Event, Kind};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::io::{self, Write};

/// Counters never exceed this (rsm.py: "bounded runtime").
const COUNTER_CAP: u64 = 50;
/// `uniqueness_emphasis` never exceeds this.
const UNIQUENESS_CAP: u64 = 20;
/// Knowledge-gap evidence older than this many folded events is forgotten.
const KNOWLEDGE_WINDOW: u64 = 500;
/// A topic with more than this many recent failures is a knowledge gap.
const GAP_THRESHOLD: u64 = 3;
/// A reflection at most this many events after an identity query can show the meta-pattern.
const IDENTITY_FOLLOWUP_LIMIT: u64 = 5;
/// The only meta-pattern the reference knows.
const META_PATTERN_LABEL: &str = "identity_queries_trigger_determinism_ref";
/// The key the uniqueness score is stored under among the tendencies.
const UNIQUENESS_KEY: &str = "uniqueness_emphasis";
/// The tendency whose increments arm the meta-pattern.
const IDENTITY_QUERY: &str = "identity_query";
/// How many characters of a gap topic a covering reflection intent must start with.
const COVER_PREFIX_CHARS: usize = 50;

const DETERMINISM_MARKERS: &[&str] = &["determinism", "deterministic"];
/// The model's own words, which most tendencies are counted in: its replies and reflections.
const OWN_WORDS: &[Kind] = &[Kind::AssistantMessage, Kind::Reflection];
/// The reference's self-model event, which its own fold skips; pmm never writes it.
const RSM_UPDATE: &str = "rsm_update";

/// `(tendency, kinds it watches, markers summed)` in the reference's order.
const PATTERNS: &[(&str, &[Kind], &[&str])] = &[
    (IDENTITY_QUERY, &[Kind::UserMessage], &["who are you"]),
    ("determinism_emphasis", OWN_WORDS, DETERMINISM_MARKERS),
    ("stability_emphasis", OWN_WORDS, &["stability"]),
    (
        "adaptability_emphasis",
        OWN_WORDS,
        &["adaptability", "adapt"],
    ),
    (
        "instantiation_capacity",
        OWN_WORDS,
        &["instantiation", "entity"],
    ),
];

/// The self-model as a pure fold. Serialisable as a whole so that a checkpoint can hold it and
/// a fold resumed from the restored value continues exactly as an uninterrupted one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rsm {
    /// Last folded id; events at or below it are ignored (rsm.py `observe`).
    last_id: Option<i64>,
    /// Events folded so far: both the reference's `_event_index` and `_total_events`, which
    /// only differ after its whole-ledger `rebuild` overwrite (see the module doc).
    events: u64,
    /// Tendency counters, `uniqueness_emphasis` included; sorted as the snapshot lists them.
    tendencies: BTreeMap<String, u64>,
    /// The event index of the last event that incremented `identity_query`.
    last_identity_query: Option<u64>,
    /// Meta-pattern labels seen.
    meta_patterns: BTreeSet<String>,
    /// `(event index, topic)` of gap evidence inside the window, oldest first.
    gap_window: VecDeque<(u64, String)>,
    /// Evidence per topic inside the window (entries at zero are removed).
    gap_counts: BTreeMap<String, u64>,
    /// Distinct hash prefixes seen, while they are kept (see the module docs).
    prefixes: Prefixes,
    /// Set once the prefixes are no longer kept (then `prefixes` is empty).
    prefixes_frozen: bool,
    /// How many distinct prefixes (exact while `prefixes` is kept, then every later prefix
    /// counts as new).
    distinct_prefixes: u64,
    /// Every string `intent` of a JSON reflection, in order.
    intents: IntentLog,
}

/// The reflection intents, interned: each distinct intent once, and the sequence as indexes
/// into them. The list grows without bound (about 45k intents at 10⁶ events), but most of it
/// repeats: the kernel's reflections carry a handful of fixed intents ("retrieval verification
/// OK", `<kind>_analysis`); only the per-turn reflections carry new text (the user's message).
/// Interning keeps memory and checkpoints proportional to the distinct text, and printing the
/// list a copy per element.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(try_from = "IntentLogParts")]
pub struct IntentLog {
    distinct: Vec<String>,
    /// In a checkpoint: one byte string of varints (a byte per element while there are at
    /// most 128 distinct intents), decoded in one pass rather than parsed number by number.
    #[serde(with = "super::packed::varints")]
    seq: Vec<u32>,
    /// `distinct` inverted; rebuilt on the first push after a checkpoint is restored.
    #[serde(skip)]
    index: HashMap<String, u32>,
}

/// An [`IntentLog`] as a checkpoint holds it, before its indexes are checked: a checkpoint
/// whose sequence points past the distinct intents (damaged, or forged with a matching hash)
/// is refused, so the caller rebuilds instead of panicking on the first look-up.
#[derive(Deserialize)]
struct IntentLogParts {
    distinct: Vec<String>,
    #[serde(with = "super::packed::varints")]
    seq: Vec<u32>,
}

/// A checkpointed [`IntentLog`] whose sequence points past its distinct intents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("intent index {index} out of range ({distinct} distinct intents)")]
struct IntentOutOfRange {
    index: u32,
    distinct: usize,
}

impl TryFrom<IntentLogParts> for IntentLog {
    type Error = IntentOutOfRange;

    fn try_from(parts: IntentLogParts) -> Result<Self, Self::Error> {
        let n = parts.distinct.len();
        if let Some(&index) = parts.seq.iter().find(|&&i| i as usize >= n) {
            return Err(IntentOutOfRange { index, distinct: n });
        }
        Ok(IntentLog {
            distinct: parts.distinct,
            seq: parts.seq,
            index: HashMap::new(),
        })
    }
}

impl PartialEq for IntentLog {
    fn eq(&self, other: &Self) -> bool {
        self.distinct == other.distinct && self.seq == other.seq
    }
}

impl IntentLog {
    fn push(&mut self, intent: &str) {
        if self.index.len() != self.distinct.len() {
            self.index = (0..)
                .zip(&self.distinct)
                .map(|(i, s)| (s.clone(), i))
                .collect();
        }
        let n = match self.index.get(intent) {
            Some(&n) => n,
            None => {
                let n = self.distinct.len() as u32;
                self.distinct.push(intent.to_string());
                self.index.insert(intent.to_string(), n);
                n
            }
        };
        self.seq.push(n);
    }

    /// The intents in order.
    fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        self.seq.iter().map(|&n| self.distinct[n as usize].as_str())
    }

    /// Writes the snapshot's `reflections` list: `[{"intent":"…"},…]`, only the newest
    /// `keep` when given.
    fn write_json(&self, out: &mut dyn Write, keep: Option<usize>) -> io::Result<()> {
        let skip = keep.map_or(0, |k| self.seq.len().saturating_sub(k));
        if self.seq.len() - skip < self.distinct.len() {
            // Fewer entries than distinct intents (a summary's newest few): each written as
            // it comes, not every distinct intent rendered first (`--deep` writes one per
            // summary_update).
            return self.write_json_each(out, skip);
        }
        let rendered: Vec<Vec<u8>> = self
            .distinct
            .iter()
            .map(|s| {
                let mut b = b"{\"intent\":".to_vec();
                // Serializing a &str into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut b, s);
                b.push(b'}');
                b
            })
            .collect();
        // Assembled in blocks, one `write_all` each rather than two per intent: at 10⁶ events
        // the list is ~45k intents and 3.7 MB, most of the `--state` record.
        const BLOCK: usize = 1 << 16;
        let mut block = Vec::with_capacity(BLOCK + 1024);
        block.push(b'[');
        for (i, &n) in self.seq.iter().skip(skip).enumerate() {
            if i > 0 {
                block.push(b',');
            }
            block.extend_from_slice(&rendered[n as usize]);
            if block.len() >= BLOCK {
                out.write_all(&block)?;
                block.clear();
            }
        }
        block.push(b']');
        out.write_all(&block)
    }

    /// [`IntentLog::write_json`] of the entries from `skip` on, each serialized in turn.
    fn write_json_each(&self, out: &mut dyn Write, skip: usize) -> io::Result<()> {
        let mut block = Vec::with_capacity(1024);
        block.push(b'[');
        // Skipped on the sequence itself: `iter().skip()` would map every skipped entry, a
        // walk over the whole log for each summary (quadratic in a long ledger's `--deep`).
        let newest = self.seq.get(skip..).unwrap_or_default();
        for (i, intent) in newest
            .iter()
            .map(|&n| self.distinct[n as usize].as_str())
            .enumerate()
        {
            if i > 0 {
                block.push(b',');
            }
            block.extend_from_slice(b"{\"intent\":");
            // Serializing a &str into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut block, intent);
            block.push(b'}');
        }
        block.push(b']');
        out.write_all(&block)
    }
}

/// Keep hash prefixes exactly at least this long (and until one repeats); see the module docs.
pub const FREEZE_PREFIXES_AFTER: u64 = 1000;

/// Distinct 8-character hash prefixes: lowercase hex ones as integers, any other shape
/// (imported or hand-made hashes) as strings. The hex ones read from a checkpoint stay a
/// sorted vector, searched by binary search, so that loading a checkpoint copies them: up to
/// ~10⁵ of them until the first repeat, whose hash-set inserts cost every tick and turn 3 ms
/// at 10⁵ events. Those seen since go to a hash set (up to ~10⁵ inserts in a rebuild, where a
/// B-tree costs a tenth of it). Equality is of the sets, however they are split.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(from = "PrefixesRepr", into = "PrefixesRepr")]
struct Prefixes {
    loaded: Vec<u32>,
    fresh: HashSet<u32>,
    other: HashSet<String>,
}

impl Prefixes {
    /// Adds a hex prefix; true when it is new.
    fn insert_hex(&mut self, n: u32) -> bool {
        self.loaded.binary_search(&n).is_err() && self.fresh.insert(n)
    }

    fn hex_len(&self) -> usize {
        self.loaded.len() + self.fresh.len()
    }

    fn has_hex(&self, n: u32) -> bool {
        self.loaded.binary_search(&n).is_ok() || self.fresh.contains(&n)
    }
}

impl PartialEq for Prefixes {
    fn eq(&self, o: &Prefixes) -> bool {
        self.hex_len() == o.hex_len()
            && self.other == o.other
            && self.loaded.iter().chain(&self.fresh).all(|&n| o.has_hex(n))
    }
}

impl Eq for Prefixes {}

/// [`Prefixes`] as a checkpoint holds them: every hex prefix in one sorted byte string.
#[derive(Serialize, Deserialize)]
struct PrefixesRepr {
    #[serde(with = "super::packed::sorted_u32s")]
    hex: Vec<u32>,
    other: HashSet<String>,
}

impl From<PrefixesRepr> for Prefixes {
    fn from(r: PrefixesRepr) -> Prefixes {
        Prefixes {
            loaded: r.hex,
            fresh: HashSet::new(),
            other: r.other,
        }
    }
}

impl From<Prefixes> for PrefixesRepr {
    fn from(p: Prefixes) -> PrefixesRepr {
        let mut hex = p.loaded;
        hex.extend(p.fresh);
        hex.sort_unstable();
        PrefixesRepr {
            hex,
            other: p.other,
        }
    }
}

/// What changed between two self-models (mirror.py `diff_rsm`), in its JSON shape.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RsmDiff {
    /// `b − a` per tendency over the union of keys, non-zero changes only.
    pub tendencies_delta: BTreeMap<String, i64>,
    /// Knowledge gaps in `b` but not in `a`, sorted.
    pub gaps_added: Vec<String>,
    /// Knowledge gaps in `a` but not in `b`, sorted.
    pub gaps_resolved: Vec<String>,
}

// Python's `str.isspace`/`strip` (FORMATS.md §1.11): the one definition, in `pystr`.
use crate::pystr::strip as py_strip;

/// How many characters of its message a synthesized reflection's `intent` or `outcome` keeps.
pub const SYNTHESIZED_CHARS: usize = 256;

/// A synthesized reflection's `intent` (from the turn's user message) or `outcome` (from its
/// reply), FORMATS.md §7.1: the text stripped, its first [`SYNTHESIZED_CHARS`] characters.
/// The turn writes it, `pmm-verify --deep` recomputes it, and the self-model reads intents.
pub fn synthesized_text(message: &str) -> String {
    py_strip(message).chars().take(SYNTHESIZED_CHARS).collect()
}

/// Python's `haystack.count(needle)` for a non-empty needle: non-overlapping, left to right.
/// Matching UTF-8 bytes gives the same count as matching code points.
fn py_count(haystack: &str, needle: &str) -> u64 {
    haystack.matches(needle).count() as u64
}

/// The first `n` characters (code points) of `s`, like Python's `s[:n]`.
fn prefix_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A lowercase-hex 8-character prefix as an integer; other shapes stay strings.
fn hex_prefix(prefix: &str) -> Option<u32> {
    let lower_hex = prefix.len() == 8
        && prefix
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if lower_hex {
        u32::from_str_radix(prefix, 16).ok()
    } else {
        None
    }
}

impl Rsm {
    /// Folds one event. `rsm_update` events are invisible to the model, and events with an id
    /// at or below the last folded one are ignored, as in the reference.
    pub fn apply(&mut self, ev: &Event) {
        if ev.kind == RSM_UPDATE {
            return;
        }
        if self.last_id.is_some_and(|last| ev.id <= last) {
            return;
        }
        self.last_id = Some(ev.id);
        self.events += 1;
        let index = self.events;

        if let Some(hash) = ev.hash.as_deref().filter(|h| !h.is_empty()) {
            let prefix = prefix_chars(hash, 8);
            let new = if self.prefixes_frozen {
                true
            } else {
                match hex_prefix(prefix) {
                    Some(n) => self.prefixes.insert_hex(n),
                    None => self.prefixes.other.insert(prefix.to_string()),
                }
            };
            if new {
                self.distinct_prefixes += 1;
            }
            if !self.prefixes_frozen
                && self.events >= FREEZE_PREFIXES_AFTER
                && self.distinct_prefixes < self.events
            {
                self.prefixes = Prefixes::default();
                self.prefixes_frozen = true;
            }
        }

        let content = py_strip(&ev.content);
        let kind = &ev.kind;
        // Only these kinds look at the text; lowercasing anything else would be wasted work.
        if matches!(
            kind,
            Kind::UserMessage | Kind::AssistantMessage | Kind::Reflection
        ) {
            let lower = content.to_lowercase();
            self.track_tendencies(kind, &lower, index);
            if *kind == Kind::Reflection {
                self.track_meta_patterns(&lower, index);
            }
            if *kind == Kind::AssistantMessage {
                self.track_gap(ev, &lower, index);
            }
        }
        self.trim_gap_window();

        if *kind == Kind::Reflection {
            if let Ok(Value::Object(data)) = serde_json::from_str::<Value>(content) {
                if let Some(Value::String(intent)) = data.get("intent") {
                    self.intents.push(intent);
                }
            }
        }

        for count in self.tendencies.values_mut() {
            *count = (*count).min(COUNTER_CAP);
        }
        let distinct = self.distinct_prefixes as f64;
        // The reference's float arithmetic, truncated by `int()`.
        let score = (distinct / self.events.max(1) as f64 * 10.0) as u64;
        self.tendencies
            .insert(UNIQUENESS_KEY.to_string(), score.min(UNIQUENESS_CAP));
    }

    fn track_tendencies(&mut self, kind: &Kind, lower: &str, index: u64) {
        if lower.is_empty() {
            return;
        }
        for (name, kinds, markers) in PATTERNS {
            if !kinds.contains(kind) {
                continue;
            }
            let inc: u64 = markers.iter().map(|m| py_count(lower, m)).sum();
            if inc > 0 {
                *self.tendencies.entry((*name).to_string()).or_insert(0) += inc;
                if *name == IDENTITY_QUERY {
                    self.last_identity_query = Some(index);
                }
            }
        }
    }

    fn track_meta_patterns(&mut self, lower: &str, index: u64) {
        let Some(last) = self.last_identity_query else {
            return;
        };
        if index - last <= IDENTITY_FOLLOWUP_LIMIT
            && DETERMINISM_MARKERS.iter().any(|m| lower.contains(m))
        {
            self.meta_patterns.insert(META_PATTERN_LABEL.to_string());
        }
    }

    fn track_gap(&mut self, ev: &Event, lower: &str, index: u64) {
        if !lower.contains("claim: failed") && !lower.contains("unknown") {
            return;
        }
        let meta = ev.meta_map().unwrap_or_default();
        let topic = match meta.get("topic") {
            Some(Value::String(t)) if !py_strip(t).is_empty() => py_strip(t).to_string(),
            _ => "general".to_string(),
        };
        *self.gap_counts.entry(topic.clone()).or_insert(0) += 1;
        self.gap_window.push_back((index, topic));
    }

    fn trim_gap_window(&mut self) {
        let min_allowed = (self.events + 1).saturating_sub(KNOWLEDGE_WINDOW).max(1);
        while let Some((at, _)) = self.gap_window.front() {
            if *at >= min_allowed {
                break;
            }
            let Some((_, topic)) = self.gap_window.pop_front() else {
                break;
            };
            if let Some(count) = self.gap_counts.get_mut(&topic) {
                *count -= 1;
                if *count == 0 {
                    self.gap_counts.remove(&topic);
                }
            }
        }
    }

    /// The tendency counters, sorted by name.
    pub fn tendencies(&self) -> &BTreeMap<String, u64> {
        &self.tendencies
    }

    /// Topics with more than three failures among the last 500 events, sorted. (The reference's
    /// own `RecursiveSelfModel.knowledge_gap_count` is the length of this list.)
    pub fn knowledge_gaps(&self) -> Vec<String> {
        self.gap_counts
            .iter()
            .filter(|(_, n)| **n > GAP_THRESHOLD)
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// The meta-pattern labels observed, sorted.
    pub fn interaction_meta_patterns(&self) -> Vec<String> {
        self.meta_patterns.iter().cloned().collect()
    }

    /// Every reflection intent, in ledger order.
    pub fn reflection_intents(&self) -> Vec<&str> {
        self.intents.iter().collect()
    }

    /// The id of the last folded event.
    pub fn last_event_id(&self) -> Option<i64> {
        self.last_id
    }

    /// The knowledge-gap count the reference's prompts and kernel use (mirror.py
    /// `rsm_knowledge_gaps`, FORMATS.md §5.2): topics seen exactly once in the window that no
    /// reflection intent covers, i.e. no intent starts with the topic's first 50 characters.
    pub fn knowledge_gap_count(&self) -> usize {
        self.gap_counts
            .iter()
            .filter(|(topic, n)| {
                let head = prefix_chars(topic, COVER_PREFIX_CHARS);
                **n == 1 && !self.intents.distinct.iter().any(|i| i.starts_with(head))
            })
            .count()
    }

    /// The reference snapshot (rsm.py `snapshot`): the value stored as `summary_update`
    /// `meta.rsm_state`. The concept graph is passed in because the reference computes the
    /// concept metrics from the ledger at the same moment; fold both over the same events.
    pub fn snapshot(&self, concepts: &ConceptGraph) -> Value {
        let mut bytes = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = self.snapshot_view(concepts).write_json(&mut bytes);
        serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({}))
    }

    /// The snapshot as a borrowing view that writes exactly [`Rsm::snapshot`]'s JSON without
    /// building a value tree first: a ledger of 10⁶ events carries ~55k reflection intents,
    /// and a map per intent costs more than everything else in `--state` together.
    pub fn snapshot_view<'a>(&'a self, concepts: &'a ConceptGraph) -> SnapshotView<'a> {
        SnapshotView {
            rsm: self,
            concepts,
            keep: None,
        }
    }

    /// The snapshot our own `summary_update` events carry: the reference's structure with only
    /// the newest [`SUMMARY_REFLECTIONS`] reflection intents (the reference embeds every
    /// intent since genesis in every summary, so each one grows with the ledger — FORMATS.md
    /// §17 item 29), and how many there are in all.
    pub fn summary_snapshot(&self, concepts: &ConceptGraph) -> (Value, usize) {
        let bytes = self.snapshot_json(concepts, true);
        (
            serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({})),
            self.intents.seq.len(),
        )
    }

    /// The JSON [`Rsm::snapshot`] (or, with `ours`, [`Rsm::summary_snapshot`]) parses, as
    /// serde_json writes it: a value that serializes to these bytes is that snapshot, with no
    /// value tree built (what `pmm-verify --deep` compares a summary's `rsm_state` with first).
    pub fn snapshot_json(&self, concepts: &ConceptGraph, ours: bool) -> Vec<u8> {
        let mut bytes = Vec::new();
        let view = SnapshotView {
            rsm: self,
            concepts,
            keep: ours.then_some(SUMMARY_REFLECTIONS),
        };
        // Writing into a Vec cannot fail.
        let _ = view.write_json(&mut bytes);
        bytes
    }
}

/// How many reflection intents our `summary_update` snapshots keep (the newest ones); the
/// meta says how many there were (`rsm_reflections_total`).
pub const SUMMARY_REFLECTIONS: usize = 20;

/// See [`Rsm::snapshot_view`].
pub struct SnapshotView<'a> {
    rsm: &'a Rsm,
    concepts: &'a ConceptGraph,
    keep: Option<usize>,
}

impl SnapshotView<'_> {
    /// Appends the snapshot as compact JSON (serde_json's escaping, keys in code-point order
    /// as a `serde_json::Map` orders them), the intents copied in as one block.
    pub fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        fn field<T: Serialize + ?Sized>(
            out: &mut dyn Write,
            key: &str,
            value: &T,
        ) -> io::Result<()> {
            out.write_all(key.as_bytes())?;
            serde_json::to_writer(&mut *out, value).map_err(io::Error::other)
        }
        field(out, "{\"behavioral_tendencies\":", &self.rsm.tendencies)?;
        field(
            out,
            ",\"concept_metrics\":",
            &self.concepts.concept_metrics(),
        )?;
        field(out, ",\"intents\":", &self.rsm.gap_counts)?;
        field(
            out,
            ",\"interaction_meta_patterns\":",
            &self.rsm.meta_patterns,
        )?;
        field(out, ",\"knowledge_gaps\":", &self.rsm.knowledge_gaps())?;
        out.write_all(b",\"reflections\":")?;
        self.rsm.intents.write_json(out, self.keep)?;
        out.write_all(b"}")?;
        Ok(())
    }
}

/// How the self-model moved from `a` to `b` (mirror.py `diff_rsm`, which folds the ledger up to
/// two ids and compares; here the caller folds and passes both states).
pub fn diff(a: &Rsm, b: &Rsm) -> RsmDiff {
    diff_marks(&a.mark(), &b.mark())
}

/// What [`diff`] compares of a self-model: its tendencies and its knowledge gaps. Small, so
/// the fold keeps the one at the newest summary ([`crate::projection::state::Projections`])
/// and a tick compares with it without folding the ledger again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RsmMark {
    /// The tendency counters.
    pub tendencies: BTreeMap<String, u64>,
    /// The knowledge gaps, sorted.
    pub gaps: BTreeSet<String>,
}

impl Rsm {
    /// The tendencies and gaps, as [`diff`] compares them.
    pub fn mark(&self) -> RsmMark {
        RsmMark {
            tendencies: self.tendencies.clone(),
            gaps: self.knowledge_gaps().into_iter().collect(),
        }
    }
}

/// [`diff`] of two marks.
pub fn diff_marks(a: &RsmMark, b: &RsmMark) -> RsmDiff {
    let keys: BTreeSet<&String> = a.tendencies.keys().chain(b.tendencies.keys()).collect();
    let get = |m: &BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0) as i64;
    let tendencies_delta = keys
        .into_iter()
        .filter_map(|k| {
            let change = get(&b.tendencies, k) - get(&a.tendencies, k);
            (change != 0).then(|| (k.clone(), change))
        })
        .collect();
    RsmDiff {
        tendencies_delta,
        gaps_added: b.gaps.difference(&a.gaps).cloned().collect(),
        gaps_resolved: a.gaps.difference(&b.gaps).cloned().collect(),
    }
}

#[cfg(test)]
impl Rsm {
    /// The number of events folded.
    pub fn events_folded(&self) -> u64 {
        self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The newest few intents, written one by one, are the bytes the whole list's block
    /// writer gives for them (repeats, escapes and all).
    #[test]
    fn intent_log_tails_write_like_the_whole_list() {
        let mut log = IntentLog::default();
        for i in 0..50 {
            log.push(&format!("intent \"{}\" é\n", i % 7));
        }
        let whole = |log: &IntentLog, keep| {
            let mut b = Vec::new();
            log.write_json(&mut b, keep).unwrap();
            b
        };
        let all: Vec<serde_json::Value> = serde_json::from_slice(&whole(&log, None)).unwrap();
        assert_eq!(all.len(), 50);
        for keep in [0, 1, 3, 6, 7, 20, 50, 80] {
            let tail: Vec<serde_json::Value> =
                serde_json::from_slice(&whole(&log, Some(keep))).unwrap();
            assert_eq!(tail, all[50 - keep.min(50)..], "{keep}");
            let mut each = Vec::new();
            log.write_json_each(&mut each, 50 - keep.min(50)).unwrap();
            assert_eq!(each, whole(&log, Some(keep)), "{keep}");
            assert_eq!(serde_json::to_vec(&tail).unwrap(), each, "{keep}");
        }
    }

    struct Ledger {
        next: i64,
        events: Vec<Event>,
    }

    impl Ledger {
        fn new() -> Self {
            Ledger {
                next: 1,
                events: Vec::new(),
            }
        }

        fn push(&mut self, kind: &str, content: &str, meta: &str) -> &mut Self {
            let id = self.next;
            self.next += 1;
            self.events.push(Event {
                id,
                ts: String::new(),
                kind: kind.into(),
                content: content.into(),
                meta: meta.into(),
                prev_hash: None,
                hash: Some(format!(
                    "{:08x}{}",
                    (id as u32).wrapping_mul(2_654_435_761),
                    "0".repeat(56)
                )),
            });
            self
        }

        fn fold(&self) -> Rsm {
            let mut r = Rsm::default();
            for e in &self.events {
                r.apply(e);
            }
            r
        }
    }

    /// The mark the fold keeps at the newest summary is the one a fold that stops at that
    /// summary gives, and the diff from it is the diff of the two self-models.
    #[test]
    fn the_mark_at_the_newest_summary_is_the_fold_up_to_it() {
        use crate::projection::state::Projections;
        let mut l = Ledger::new();
        for i in 0..6 {
            l.push(
                "assistant_message",
                "My identity adapts. CLAIM: FAILED x",
                r#"{"topic":"math"}"#,
            );
            if i % 2 == 1 {
                l.push("summary_update", "{}", "{}");
            }
        }
        l.push(
            "assistant_message",
            "I adapt and adapt; my identity grows",
            "{}",
        );
        let mut p = Projections::default();
        for e in &l.events {
            p.apply(e);
        }
        let at = p.autonomy.last_summary.expect("a summary");
        let mut then = Rsm::default();
        for e in l.events.iter().filter(|e| e.id <= at) {
            then.apply(e);
        }
        assert_eq!(p.at_summary.as_ref(), Some(&then.mark()));
        assert_eq!(diff_marks(&then.mark(), &p.rsm.mark()), diff(&then, &p.rsm));
        assert!(!diff(&then, &p.rsm).tendencies_delta.is_empty());
    }

    fn tendency(r: &Rsm, key: &str) -> Option<u64> {
        r.tendencies().get(key).copied()
    }

    #[test]
    fn entity_inside_identity_and_adapt_inside_adaptability_both_count() {
        let mut l = Ledger::new();
        l.push(
            "assistant_message",
            "My Identity is an entity; ADAPTABILITY lets me adapt.",
            "{}",
        );
        let r = l.fold();
        // identity → entity (1) + entity (1)
        assert_eq!(tendency(&r, "instantiation_capacity"), Some(2));
        // adaptability (1) + adapt in adaptability (1) + adapt (1)
        assert_eq!(tendency(&r, "adaptability_emphasis"), Some(3));
        // Keys appear only once incremented.
        assert_eq!(tendency(&r, "stability_emphasis"), None);
        assert_eq!(tendency(&r, "uniqueness_emphasis"), Some(10));
    }

    #[test]
    fn counts_are_non_overlapping_and_restricted_by_kind() {
        let mut l = Ledger::new();
        l.push("user_message", "determinism deterministic", "{}");
        l.push("reflection", "deterministic determinism", "{}");
        l.push("user_message", "Who are you? who are you", "{}");
        l.push("assistant_message", "who are you", "{}");
        let r = l.fold();
        // "deterministic" contains "determinis" but not "determinism": 1 + 1.
        assert_eq!(tendency(&r, "determinism_emphasis"), Some(2));
        assert_eq!(tendency(&r, "identity_query"), Some(2));
        assert_eq!(py_count("aaaa", "aa"), 2);
    }

    #[test]
    fn counters_cap_at_fifty() {
        let mut l = Ledger::new();
        l.push("reflection", &"stability ".repeat(80), "{}");
        l.push("reflection", "stability", "{}");
        assert_eq!(tendency(&l.fold(), "stability_emphasis"), Some(50));
    }

    /// A filler event whose hash starts with `prefix`.
    fn ev(id: i64, prefix: &str) -> Event {
        Event {
            id,
            ts: String::new(),
            kind: "filler".into(),
            content: String::new(),
            meta: "{}".into(),
            prev_hash: None,
            hash: Some(format!("{prefix}{}", "0".repeat(56))),
        }
    }

    #[test]
    fn prefixes_freeze_after_a_repeat_past_the_threshold() {
        let mut r = Rsm::default();
        let n = FREEZE_PREFIXES_AFTER as i64;
        for id in 1..=n {
            r.apply(&ev(id, &format!("{id:08x}")));
        }
        assert!(!r.prefixes_frozen, "no repeat yet: still exact");
        assert_eq!(tendency(&r, "uniqueness_emphasis"), Some(10));
        r.apply(&ev(n + 1, "00000001")); // the first repeat
        assert!(r.prefixes_frozen && r.prefixes.hex_len() == 0);
        assert_eq!(tendency(&r, "uniqueness_emphasis"), Some(9));
        for id in n + 2..=n + 50 {
            r.apply(&ev(id, "00000001"));
        }
        // Frozen: later prefixes count as new, so the score stays 9 (the exact value would also
        // be 9 until repeats exceed a tenth of the events).
        assert_eq!(tendency(&r, "uniqueness_emphasis"), Some(9));
    }

    /// Prefixes restored from a checkpoint (a sorted vector) still catch a repeat, and the
    /// self-model equals one that folded everything.
    #[test]
    fn prefixes_survive_a_checkpoint() {
        let n = FREEZE_PREFIXES_AFTER as i64 + 10;
        let mut whole = Rsm::default();
        let mut first = Rsm::default();
        for id in 1..=n {
            let e = ev(id, &format!("{:08x}", id * 7919));
            whole.apply(&e);
            if id <= n / 2 {
                first.apply(&e);
            }
        }
        let mut restored: Rsm =
            rmp_serde::from_slice(&rmp_serde::to_vec_named(&first).unwrap()).unwrap();
        for id in n / 2 + 1..=n {
            restored.apply(&ev(id, &format!("{:08x}", id * 7919)));
        }
        assert_eq!(restored, whole);
        assert!(!restored.prefixes_frozen);
        restored.apply(&ev(n + 1, &format!("{:08x}", 7919))); // a loaded prefix again
        assert!(
            restored.prefixes_frozen,
            "the repeat of a restored prefix is seen"
        );
        let again: Rsm = rmp_serde::from_slice(&rmp_serde::to_vec_named(&whole).unwrap()).unwrap();
        assert_eq!(again, whole);
    }

    #[test]
    fn uniqueness_comes_from_hash_prefixes() {
        let mut l = Ledger::new();
        l.push("filler", "", "{}").push("filler", "", "{}");
        l.push("filler", "", "{}").push("filler", "", "{}");
        for e in &mut l.events {
            e.hash = Some("deadbeef".repeat(8));
        }
        l.events[3].hash = None;
        // One distinct prefix over four events: int(1/4*10) = 2.
        assert_eq!(tendency(&l.fold(), "uniqueness_emphasis"), Some(2));
    }

    #[test]
    fn meta_pattern_needs_a_determinism_reflection_within_five_events() {
        let mut l = Ledger::new();
        l.push("user_message", "who are you", "{}");
        for _ in 0..4 {
            l.push("filler", "", "{}");
        }
        l.push("reflection", "Deterministic replay.", "{}");
        assert_eq!(
            l.fold().interaction_meta_patterns(),
            vec![META_PATTERN_LABEL]
        );

        let mut late = Ledger::new();
        late.push("user_message", "who are you", "{}");
        for _ in 0..5 {
            late.push("filler", "", "{}");
        }
        late.push("reflection", "determinism", "{}");
        assert!(late.fold().interaction_meta_patterns().is_empty());
    }

    #[test]
    fn knowledge_gaps_need_four_hits_inside_the_500_window() {
        let mut l = Ledger::new();
        for _ in 0..4 {
            l.push(
                "assistant_message",
                "CLAIM: FAILED here",
                r#"{"topic":" math "}"#,
            );
        }
        l.push("assistant_message", "unknown", "{}");
        let r = l.fold();
        assert_eq!(r.knowledge_gaps(), vec!["math"]);
        let snap = r.snapshot(&ConceptGraph::default());
        assert_eq!(snap["intents"], json!({"general": 1, "math": 4}));
        assert_eq!(r.knowledge_gap_count(), 1, "general is a singleton");

        // The first hit was event 1; after event 500 it is still inside, after 501 not.
        for _ in 0..495 {
            l.push("filler", "", "{}");
        }
        assert_eq!(l.fold().knowledge_gaps(), vec!["math"]);
        l.push("filler", "", "{}");
        let r = l.fold();
        assert!(r.knowledge_gaps().is_empty());
        assert_eq!(
            r.snapshot(&ConceptGraph::default())["intents"],
            json!({"general": 1, "math": 3})
        );
    }

    #[test]
    fn a_reflection_intent_covers_a_singleton_gap() {
        let mut l = Ledger::new();
        l.push("assistant_message", "unknown", r#"{"topic":"physics"}"#);
        assert_eq!(l.fold().knowledge_gap_count(), 1);
        l.push("reflection", r#"  {"intent":"physics questions"} "#, "{}");
        let r = l.fold();
        assert_eq!(r.knowledge_gap_count(), 0);
        assert_eq!(r.reflection_intents(), ["physics questions"]);
        assert_eq!(
            r.snapshot(&ConceptGraph::default())["reflections"],
            json!([{"intent": "physics questions"}])
        );
    }

    #[test]
    fn a_checkpointed_intent_log_with_an_index_out_of_range_is_refused() {
        let mut log = IntentLog::default();
        for i in ["a", "b", "a"] {
            log.push(i);
        }
        let bytes = rmp_serde::to_vec_named(&log).unwrap();
        let back: IntentLog = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, log);
        assert_eq!(back.iter().collect::<Vec<_>>(), ["a", "b", "a"]);

        // The same bytes with one more index, pointing past the two distinct intents.
        let mut forged = log.clone();
        forged.seq.push(2);
        let bytes = rmp_serde::to_vec_named(&forged).unwrap();
        let err = rmp_serde::from_slice::<IntentLog>(&bytes).unwrap_err();
        assert!(
            err.to_string().contains("intent index 2 out of range"),
            "{err}"
        );
    }

    #[test]
    fn diff_reports_changed_tendencies_and_gaps() {
        let mut l = Ledger::new();
        l.push("reflection", "stability", "{}");
        let a = l.fold();
        for _ in 0..4 {
            l.push("assistant_message", "unknown stability", "{}");
        }
        let b = l.fold();
        let d = diff(&a, &b);
        assert_eq!(
            d.tendencies_delta,
            BTreeMap::from([("stability_emphasis".into(), 4)])
        );
        assert_eq!(d.gaps_added, vec!["general"]);
        assert!(d.gaps_resolved.is_empty());
        let back = diff(&b, &a);
        assert_eq!(back.tendencies_delta["stability_emphasis"], -4);
        assert_eq!(back.gaps_resolved, vec!["general"]);
        assert_eq!(diff(&a, &a), RsmDiff::default());
        assert_eq!(
            serde_json::to_value(&d).expect("json"),
            json!({"tendencies_delta": {"stability_emphasis": 4}, "gaps_added": ["general"], "gaps_resolved": []})
        );
    }

    #[test]
    fn rsm_update_and_replayed_ids_are_ignored() {
        let mut l = Ledger::new();
        l.push("reflection", "stability", "{}");
        l.push("rsm_update", "stability", "{}");
        let r = l.fold();
        assert_eq!(r.events_folded(), 1);
        let mut again = r.clone();
        again.apply(&l.events[0]);
        assert_eq!(again, r);
    }

    #[test]
    fn a_checkpoint_mid_fold_continues_like_a_full_fold() {
        let mut l = Ledger::new();
        l.push("user_message", "who are you", "{}");
        l.push("reflection", r#"{"intent":"determinism"}"#, "{}");
        for i in 0..600 {
            l.push(
                "assistant_message",
                "unknown entity",
                &format!(r#"{{"topic":"t{}"}}"#, i % 3),
            );
        }
        let full = l.fold();
        let mut half = Rsm::default();
        for e in &l.events[..300] {
            half.apply(e);
        }
        // Through the bytes a projection checkpoint stores (MessagePack).
        let saved = crate::projection::state::Projections {
            rsm: half,
            ..Default::default()
        }
        .to_checkpoint();
        let mut resumed = crate::projection::state::Projections::from_checkpoint(&saved)
            .expect("the checkpoint reads back")
            .rsm;
        for e in &l.events[300..] {
            resumed.apply(e);
        }
        assert_eq!(resumed, full);
    }
}
