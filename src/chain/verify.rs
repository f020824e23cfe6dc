//! The streaming verifier. See the module docs of [`crate::chain`].

use super::{event_digest, Digest};
use crate::event::Event;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// Why an event has no hash to check: its meta cannot be hashed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// The stored meta is not a JSON object.
    #[error("meta: {0}")]
    Meta(#[from] crate::canon::MetaError),
    /// The meta has no canonical form (a number out of range).
    #[error("meta: {0}")]
    Canon(#[from] crate::canon::CanonError),
}

/// The hash an event should have, from its fields (`meta` parsed here unless given). An error
/// says why there is none (meta that is not a JSON object, a number out of range).
pub fn compute(
    scratch: &mut Vec<u8>,
    ev: &Event,
    meta: Option<&Map<String, Value>>,
) -> Result<Digest, HashError> {
    let parsed;
    let meta = match meta {
        Some(m) => m,
        None => {
            parsed = ev.meta_map()?;
            &parsed
        }
    };
    Ok(event_digest(
        scratch,
        ev.kind.as_str(),
        &ev.content,
        meta,
        ev.prev_hash.as_deref(),
    )?)
}

/// How many recent hashes the verifier remembers exactly.
pub const WINDOW: usize = 1 << 16;

/// Bits in the Bloom filter of all hashes older than the window (8 MiB: at 10^7 events about
/// 4% of lookups are false alarms, which only ever cost a second pass over a ledger that
/// already has findings).
const BLOOM_BITS: usize = 1 << 26;

/// A hasher for [`Digest`] keys, which hash as their first 8 bytes (see `impl Hash for
/// Digest`): a sha256 digest is already uniformly random, so running it through SipHash again
/// is wasted work on the verifier's hot path.
#[derive(Default)]
struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
    fn write(&mut self, bytes: &[u8]) {
        // Not reached for `Digest`; a correct fallback for anything else.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
}

type DigestMap<V> = HashMap<Digest, V, std::hash::BuildHasherDefault<DigestHasher>>;

/// `ID:HASH`: the hash an event had when the anchor was saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    /// The event id.
    pub id: i64,
    /// Its hash then.
    pub hash: String,
}

/// Why a text is not an `ID:HASH` anchor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnchorError {
    /// No `:` in it.
    #[error("anchor '{0}' is not ID:HASH")]
    NotIdHash(String),
    /// The part before the `:` is not a number.
    #[error("anchor '{anchor}': '{id}' is not an event id")]
    BadId {
        /// The anchor as given.
        anchor: String,
        /// Its id part.
        id: String,
    },
    /// An id below 1, or a hash that is not 64 hex digits.
    #[error("anchor '{0}' is not ID:HASH (an id ≥ 1 and 64 hex digits)")]
    OutOfRange(String),
}

impl std::str::FromStr for Anchor {
    type Err = AnchorError;
    fn from_str(s: &str) -> Result<Self, AnchorError> {
        let (id, hash) = s
            .trim()
            .split_once(':')
            .ok_or_else(|| AnchorError::NotIdHash(s.to_string()))?;
        let id: i64 = id.trim().parse().map_err(|_| AnchorError::BadId {
            anchor: s.to_string(),
            id: id.to_string(),
        })?;
        let hash = hash.trim().to_ascii_lowercase();
        if id < 1 || Digest::from_hex(&hash).is_none() {
            return Err(AnchorError::OutOfRange(s.to_string()));
        }
        Ok(Anchor { id, hash })
    }
}

/// What is wrong, with its evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum Problem {
    /// The stored hash is not the hash of the event's fields.
    HashMismatch {
        /// The hash recomputed from kind, content, meta and prev_hash.
        expected: String,
        /// The stored hash.
        found: Option<String>,
    },
    /// `prev_hash` is not the previous event's hash.
    BrokenLink {
        /// The previous event's hash.
        expected: Option<String>,
        /// This event's `prev_hash`.
        found: Option<String>,
        /// The event whose hash `prev_hash` really is (a fork), or null (foreign).
        points_to: Option<i64>,
    },
    /// The id is not the previous id plus one (or 1 for the first event).
    IdGap {
        /// The id that should be here; `None` (null) after an id of `i64::MAX`, which no id
        /// can follow.
        expected: Option<i64>,
    },
    /// The first event has a `prev_hash`.
    GenesisPrevHash {
        /// Its `prev_hash`.
        found: String,
    },
    /// The same hash appears twice.
    DuplicateHash {
        /// The repeated hash.
        hash: String,
        /// The event that had it first.
        first_id: Option<i64>,
    },
    /// An anchor does not hold: the event has another hash, or is gone (truncation).
    AnchorMismatch {
        /// The anchored hash.
        expected: String,
        /// The hash found at that id, or null when the ledger ends before it.
        found: Option<String>,
    },
    /// A record that is not an event (with the line it is on, for files).
    Malformed {
        /// 1-based line (JSONL) or the line where parsing stopped (JSON).
        line: Option<u64>,
        /// What is wrong with it.
        error: String,
    },
    /// The input holds no event at all (an empty file, a 0-byte ledger): never a clean pass,
    /// unless the caller expects it (`pmm-verify --allow-empty`).
    Empty {
        /// What was found instead of events.
        error: String,
    },
    /// SQLite's own check of a ledger file (`PRAGMA quick_check`, or `integrity_check` with
    /// `pmm-verify --integrity`) found damage: a page the chain walk may not reach, an index
    /// that no longer matches its table, or a head below ids already written.
    SqliteDamage {
        /// `quick_check` or `integrity_check`.
        check: String,
        /// One line of what SQLite (or the head check) reported.
        error: String,
    },
    /// Not a problem: the event's content was erased by the `erasure` event `erasure_id`,
    /// which names it and its stored `hash` (its hash cannot be recomputed, the chain links
    /// through it). Printed as a `{"type":"erased"}` record, never counted as a finding.
    Erased {
        /// The stored hash, which the erasure event names.
        hash: String,
        /// The `erasure` event.
        erasure_id: i64,
        /// Why it was erased.
        reason: String,
    },
    /// A PostgreSQL ledger's head row (`pmm_head`) is not its last event: a role that may
    /// update the row moved it (every writer then refuses to append). The id is the last
    /// event's.
    HeadMismatch {
        /// The last event, `{"id","hash"}`.
        expected: Value,
        /// The head row, `{"id","hash"}`.
        found: Value,
    },
    /// The PostgreSQL server's event at the newest head this host verified has another hash:
    /// history was rewritten on the server (the id is that event's).
    HistoryRewritten {
        /// The hash this host verified.
        expected: Option<String>,
        /// The hash the server has.
        found: Option<String>,
    },
    /// The PostgreSQL server's events end before the newest head this host verified (a
    /// restored backup, a database made again, rows deleted; the id is the verified one's).
    RolledBack {
        /// The hash this host verified.
        expected: Option<String>,
        /// The server's last event (0: none).
        server_head: i64,
    },
    /// This host's cache of a PostgreSQL ledger holds an event other than the server's (it
    /// was changed on this host): programs on this host would read it.
    CacheMismatch {
        /// The server's event, as exported.
        expected: Value,
        /// The cache's.
        found: Value,
    },
    /// A derived event that does not match what its inputs give.
    DerivedMismatch {
        /// What was checked.
        what: String,
        /// What the inputs give.
        expected: Value,
        /// What the event holds.
        found: Value,
    },
}

/// One `{"type":"finding"}` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Always `finding`.
    #[serde(rename = "type")]
    pub record: &'static str,
    /// The event concerned (null for a malformed record without an id).
    pub id: Option<i64>,
    /// What is wrong.
    #[serde(flatten)]
    pub problem: Problem,
}

impl Finding {
    /// A finding about event `id`.
    pub fn new(id: Option<i64>, problem: Problem) -> Self {
        Finding {
            record: "finding",
            id,
            problem,
        }
    }
}

/// The closing `{"type":"summary"}` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Summary {
    /// Always `summary`.
    #[serde(rename = "type")]
    pub record: &'static str,
    /// Where the events came from (file name, `-`, or the database path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Events read.
    pub events: u64,
    /// The first event's id.
    pub first_id: Option<i64>,
    /// The last event's id.
    pub last_id: Option<i64>,
    /// The last event's stored hash.
    pub last_hash: Option<String>,
    /// Count of `hash_mismatch` findings.
    pub hash_mismatches: u64,
    /// Count of `broken_link` findings.
    pub broken_links: u64,
    /// Count of `id_gap` findings.
    pub id_gaps: u64,
    /// Count of `derived_mismatch` findings.
    pub derived_mismatches: u64,
    /// Count of `duplicate_hash` findings.
    pub duplicate_hashes: u64,
    /// Count of `genesis_prev_hash` findings.
    pub genesis_errors: u64,
    /// Count of `anchor_mismatch` findings.
    pub anchor_mismatches: u64,
    /// Count of `malformed` findings.
    pub malformed: u64,
    /// Count of `empty` findings (an input without events); left out when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub empty: u64,
    /// Count of `sqlite_damage` findings (SQLite ledgers only).
    pub sqlite_damage: u64,
    /// Count of `head_mismatch`, `history_rewritten`, `rolled_back` and `cache_mismatch`
    /// findings (PostgreSQL ledgers only: the server's head row, and this host's record of
    /// the ledger); left out when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub replica_findings: u64,
    /// Events reported as `erased` (not findings); left out when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub erased: u64,
    /// How many anchors were checked.
    pub anchors_checked: u64,
    /// With `--deep`: how many derived values of each kind were recomputed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deep: Option<serde_json::Value>,
    /// True when there is no finding at all.
    pub ok: bool,
    /// sha256 of all hashes concatenated in id order (the reference telemetry's digest).
    pub sha256_full_digest: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Summary {
    fn count(&mut self, p: &Problem) {
        match p {
            Problem::HashMismatch { .. } => self.hash_mismatches += 1,
            Problem::BrokenLink { .. } => self.broken_links += 1,
            Problem::IdGap { .. } => self.id_gaps += 1,
            Problem::GenesisPrevHash { .. } => self.genesis_errors += 1,
            Problem::DuplicateHash { .. } => self.duplicate_hashes += 1,
            Problem::AnchorMismatch { .. } => self.anchor_mismatches += 1,
            Problem::Malformed { .. } => self.malformed += 1,
            Problem::DerivedMismatch { .. } => self.derived_mismatches += 1,
            Problem::Empty { .. } => self.empty += 1,
            Problem::SqliteDamage { .. } => self.sqlite_damage += 1,
            Problem::Erased { .. } => self.erased += 1,
            Problem::HeadMismatch { .. }
            | Problem::HistoryRewritten { .. }
            | Problem::RolledBack { .. }
            | Problem::CacheMismatch { .. } => self.replica_findings += 1,
        }
    }

    fn findings(&self) -> u64 {
        self.hash_mismatches
            + self.broken_links
            + self.id_gaps
            + self.genesis_errors
            + self.duplicate_hashes
            + self.anchor_mismatches
            + self.malformed
            + self.derived_mismatches
            + self.empty
            + self.sqlite_damage
            + self.replica_findings
    }
}

struct Bloom {
    bits: Vec<u64>,
}

impl Bloom {
    fn new() -> Self {
        Bloom {
            bits: vec![0; BLOOM_BITS / 64],
        }
    }

    // A sha256 digest is already uniformly random: its bytes are the hash functions. Blocked
    // layout: all four bits of a digest fall in one 512-bit block (one cache line), so a
    // lookup costs one cache miss instead of four.
    fn positions(d: &Digest) -> [usize; 4] {
        const BLOCK_BITS: usize = 512;
        let word = |i: usize| {
            u32::from_le_bytes([d.0[4 * i], d.0[4 * i + 1], d.0[4 * i + 2], d.0[4 * i + 3]])
                as usize
        };
        let block = (word(0) % (BLOOM_BITS / BLOCK_BITS)) * BLOCK_BITS;
        let w = word(1) as u64 | (word(2) as u64) << 32;
        [
            block + (w & 511) as usize,
            block + ((w >> 9) & 511) as usize,
            block + ((w >> 18) & 511) as usize,
            block + ((w >> 27) & 511) as usize,
        ]
    }

    fn insert(&mut self, d: &Digest) {
        for pos in Self::positions(d) {
            self.bits[pos / 64] |= 1u64 << (pos % 64);
        }
    }
}

/// A broken link whose target was not in the window.
struct PendingLink {
    id: i64,
    expected: Option<String>,
    found: Digest,
}

/// The streaming verifier.
pub struct Verifier {
    anchors: BTreeMap<i64, String>,
    prev: Option<(i64, Option<String>)>,
    summary: Summary,
    full: Sha256,
    recent: DigestMap<i64>,
    order: VecDeque<Digest>,
    /// Allocated once the window is full: shorter ledgers never need it.
    bloom: Option<Bloom>,
    pending_links: Vec<PendingLink>,
    maybe_dups: HashMap<Digest, Vec<i64>>,
    scratch: Vec<u8>,
    eager: bool,
    /// Events in the erased form (empty content, meta `{}`) whose hash does not recompute:
    /// `(id, stored hash, recomputed)`, settled at the end against the erasure events.
    maybe_erased: Vec<(i64, Option<String>, String)>,
    /// What the verified `erasure` events name: erased id → (its hash, erasure id, reason).
    erasures: HashMap<i64, (String, i64, String)>,
    /// Whether the last event checked is in the erased form with a hash that does not
    /// recompute (the deep checker skips what depends on it).
    last_erased: bool,
}

/// What a second pass must look up, and what it found.
pub struct SecondPass {
    wanted: HashSet<Digest>,
    first_seen: HashMap<Digest, i64>,
    links: Vec<PendingLink>,
    dups: HashMap<Digest, Vec<i64>>,
}

impl SecondPass {
    /// Feed every event of the input again, in order.
    pub fn see(&mut self, id: i64, hash: Option<&str>) {
        if let Some(d) = hash.and_then(Digest::from_hex) {
            if self.wanted.contains(&d) {
                self.first_seen.entry(d).or_insert(id);
            }
        }
    }
}

impl Default for Verifier {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl Verifier {
    /// A verifier for events that must continue a chain whose head is `id` with `hash` (an
    /// import into a ledger that is not empty). Links it cannot place are reported at once.
    pub fn after(id: i64, hash: Option<String>) -> Self {
        let mut v = Verifier::new(Vec::new());
        v.prev = Some((id, hash));
        v
    }

    /// Reports every broken link at once, with `points_to` from the window or null, instead
    /// of leaving far-pointing ones to a second pass (for callers that can look hashes up
    /// themselves, like an import that has the events in a database already).
    pub fn eager(mut self) -> Self {
        self.eager = true;
        self
    }

    /// A verifier that also checks `anchors`.
    pub fn new(anchors: Vec<Anchor>) -> Self {
        Verifier {
            anchors: anchors.into_iter().map(|a| (a.id, a.hash)).collect(),
            prev: None,
            summary: Summary {
                record: "summary",
                ..Summary::default()
            },
            full: Sha256::new(),
            // Not preallocated: a short ledger should not pay page faults for a full window.
            recent: DigestMap::default(),
            order: VecDeque::new(),
            bloom: None,
            pending_links: Vec::new(),
            maybe_dups: HashMap::new(),
            scratch: Vec::with_capacity(4096),
            eager: false,
            maybe_erased: Vec::new(),
            erasures: HashMap::new(),
            last_erased: false,
        }
    }

    /// Whether the event last checked is in the erased form (empty content, meta `{}`) with a
    /// hash that does not recompute: erased, if an `erasure` event names it (settled by
    /// [`Verifier::finish`]), a mismatch otherwise.
    pub fn last_erased(&self) -> bool {
        self.last_erased
    }

    /// The smallest id that a verified `erasure` event seen so far names, if any: checks whose
    /// inputs may include it (a later turn's prompt) cannot be recomputed.
    pub fn first_erased(&self) -> Option<i64> {
        self.erasures.keys().min().copied()
    }

    /// Remembers what a verified `erasure` event names.
    fn note_erasure(&mut self, ev: &Event) {
        let Ok(meta) = serde_json::from_str::<Map<String, Value>>(&ev.meta) else {
            return;
        };
        let id = meta.get("erased_id").and_then(Value::as_i64);
        let hash = meta.get("erased_hash").and_then(Value::as_str);
        if let (Some(id), Some(hash)) = (id, hash) {
            let reason = meta.get("reason").and_then(Value::as_str).unwrap_or("");
            self.erasures
                .entry(id)
                .or_insert((hash.to_string(), ev.id, reason.to_string()));
        }
    }

    /// Settles the events in the erased form: `erased` when a verified erasure names the id
    /// and the stored hash, a hash mismatch otherwise (content changed without an erasure).
    fn settle_erased(&mut self, out: &mut Vec<Finding>) {
        for (id, found, expected) in std::mem::take(&mut self.maybe_erased) {
            let named = self.erasures.get(&id).cloned();
            match named {
                Some((hash, erasure_id, reason)) if found.as_deref() == Some(hash.as_str()) => {
                    self.summary.erased += 1;
                    let p = Problem::Erased {
                        hash,
                        erasure_id,
                        reason,
                    };
                    out.push(Finding {
                        record: "erased",
                        id: Some(id),
                        problem: p,
                    });
                }
                _ => self.emit(out, Some(id), Problem::HashMismatch { expected, found }),
            }
        }
    }

    fn emit(&mut self, out: &mut Vec<Finding>, id: Option<i64>, p: Problem) {
        self.summary.count(&p);
        out.push(Finding::new(id, p));
    }

    /// Checks the next event. `meta` is the parsed meta when the reader already has it;
    /// otherwise the stored text is parsed here. Findings are appended to `out`.
    pub fn check(&mut self, ev: &Event, meta: Option<&Map<String, Value>>, out: &mut Vec<Finding>) {
        let computed = compute(&mut self.scratch, ev, meta);
        self.check_computed(ev, computed, out);
    }

    /// Checks the next event whose hash was already computed with [`compute`] (perhaps on
    /// another thread: hashing is the costly part and needs nothing from earlier events).
    pub fn check_computed(
        &mut self,
        ev: &Event,
        computed: Result<Digest, HashError>,
        out: &mut Vec<Finding>,
    ) {
        let id = ev.id;
        self.summary.events += 1;
        if self.summary.first_id.is_none() {
            self.summary.first_id = Some(id);
        }
        self.check_id(ev, out);
        self.last_erased = false;
        let before = self.summary.hash_mismatches + self.summary.malformed;
        self.check_hash(ev, computed, out);
        if ev.kind == crate::event::Kind::Erasure
            && self.summary.hash_mismatches + self.summary.malformed == before
            && !self.last_erased
        {
            self.note_erasure(ev);
        }
        self.check_link(ev, out);
        self.check_repeat(ev, out);
        self.check_anchor(ev, out);
        self.full
            .update(ev.hash.as_deref().unwrap_or("").as_bytes());
        self.summary.last_id = Some(id);
        self.summary.last_hash = ev.hash.clone();
        self.prev = Some((id, ev.hash.clone()));
    }

    /// Ids: 1, 2, 3, ...
    fn check_id(&mut self, ev: &Event, out: &mut Vec<Finding>) {
        // An id of i64::MAX from the input has no successor: whatever follows it is a gap
        // (never a wrapped or repeated expected id).
        let expected_id = match &self.prev {
            None => Some(1),
            Some((pid, _)) => pid.checked_add(1),
        };
        if expected_id != Some(ev.id) {
            self.emit(
                out,
                Some(ev.id),
                Problem::IdGap {
                    expected: expected_id,
                },
            );
        }
    }

    /// The hash itself: the stored one is the one computed from the event.
    fn check_hash(
        &mut self,
        ev: &Event,
        computed: Result<Digest, HashError>,
        out: &mut Vec<Finding>,
    ) {
        let id = ev.id;
        match computed {
            Ok(d) => {
                let mut hex = [0u8; 64];
                if ev.hash.as_deref().map(str::as_bytes) != Some(d.write_hex(&mut hex)) {
                    if ev.content.is_empty() && ev.meta == "{}" {
                        self.last_erased = true;
                        self.maybe_erased.push((id, ev.hash.clone(), d.to_string()));
                        return;
                    }
                    self.emit(
                        out,
                        Some(id),
                        Problem::HashMismatch {
                            expected: d.to_string(),
                            found: ev.hash.clone(),
                        },
                    );
                }
            }
            Err(e) => {
                let error = e.to_string();
                self.emit(out, Some(id), Problem::Malformed { line: None, error })
            }
        }
    }

    /// The link: `prev_hash` is the previous event's hash (none for the first event). A link
    /// to a hash further back than the window is left to the second pass.
    fn check_link(&mut self, ev: &Event, out: &mut Vec<Finding>) {
        let id = ev.id;
        match &self.prev {
            None => {
                if let Some(p) = &ev.prev_hash {
                    self.emit(out, Some(id), Problem::GenesisPrevHash { found: p.clone() });
                }
            }
            Some((_, prev_hash)) => {
                if ev.prev_hash != *prev_hash {
                    let expected = prev_hash.clone();
                    let target = ev.prev_hash.as_deref().and_then(Digest::from_hex);
                    match target {
                        Some(t)
                            if !self.eager
                                && !self.recent.contains_key(&t)
                                && self.bloom_may_have(&t) =>
                        {
                            // Somewhere further back: settled by the second pass.
                            self.pending_links.push(PendingLink {
                                id,
                                expected,
                                found: t,
                            });
                        }
                        _ => {
                            let points_to = target.and_then(|t| self.recent.get(&t).copied());
                            self.emit(
                                out,
                                Some(id),
                                Problem::BrokenLink {
                                    expected,
                                    found: ev.prev_hash.clone(),
                                    points_to,
                                },
                            );
                        }
                    }
                }
            }
        }
    }

    /// Repeats: a hash seen before in the window (further back: see [`Verifier::remember`]).
    fn check_repeat(&mut self, ev: &Event, out: &mut Vec<Finding>) {
        if let Some(d) = ev.hash.as_deref().and_then(Digest::from_hex) {
            if let Some(first) = self.recent.get(&d).copied() {
                self.emit(
                    out,
                    Some(ev.id),
                    Problem::DuplicateHash {
                        hash: d.to_string(),
                        first_id: Some(first),
                    },
                );
            } else {
                self.remember(d, ev.id);
            }
        }
    }

    /// Anchors: the hash an anchor names for this id.
    fn check_anchor(&mut self, ev: &Event, out: &mut Vec<Finding>) {
        if let Some(want) = self.anchors.remove(&ev.id) {
            self.summary.anchors_checked += 1;
            if ev.hash.as_deref() != Some(want.as_str()) {
                self.emit(
                    out,
                    Some(ev.id),
                    Problem::AnchorMismatch {
                        expected: want,
                        found: ev.hash.clone(),
                    },
                );
            }
        }
    }

    fn bloom_may_have(&self, d: &Digest) -> bool {
        self.bloom.as_ref().is_some_and(|b| {
            Bloom::positions(d)
                .iter()
                .all(|&pos| b.bits[pos / 64] & (1u64 << (pos % 64)) != 0)
        })
    }

    /// Keeps `d` in the window; a hash leaving the window goes into the Bloom filter, where
    /// a later repeat of it shows up as a possible duplicate.
    fn remember(&mut self, d: Digest, id: i64) {
        if self.bloom_may_have(&d) {
            self.maybe_dups.entry(d).or_default().push(id);
        }
        if self.order.len() == WINDOW {
            if let Some(old) = self.order.pop_front() {
                self.recent.remove(&old);
                self.bloom.get_or_insert_with(Bloom::new).insert(&old);
            }
        }
        self.order.push_back(d);
        self.recent.insert(d, id);
    }

    /// Records a record that could not be read as an event.
    pub fn malformed(
        &mut self,
        id: Option<i64>,
        line: Option<u64>,
        error: String,
        out: &mut Vec<Finding>,
    ) {
        self.emit(out, id, Problem::Malformed { line, error });
    }

    /// Events checked so far.
    pub fn events(&self) -> u64 {
        self.summary.events
    }

    /// Records a finding made outside the chain walk (e.g. `derived_mismatch`).
    pub fn report(&mut self, id: Option<i64>, problem: Problem, out: &mut Vec<Finding>) {
        self.emit(out, id, problem);
    }

    /// After the last event: what a second pass over the same input must settle, if anything.
    /// `None` when nothing is left open. Possible repeats are only pursued when the first pass
    /// already found a problem (in a clean chain they are Bloom false alarms).
    pub fn second_pass(&mut self) -> Option<SecondPass> {
        let dirty = self.summary.findings() > 0 || !self.pending_links.is_empty();
        let dups = if dirty {
            std::mem::take(&mut self.maybe_dups)
        } else {
            self.maybe_dups.clear();
            HashMap::new()
        };
        if self.pending_links.is_empty() && dups.is_empty() {
            return None;
        }
        let links = std::mem::take(&mut self.pending_links);
        let wanted = links
            .iter()
            .map(|l| l.found)
            .chain(dups.keys().copied())
            .collect();
        Some(SecondPass {
            wanted,
            first_seen: HashMap::new(),
            links,
            dups,
        })
    }

    /// Turns what the second pass found into findings. When the input cannot be read twice
    /// (stdin), pass the [`SecondPass`] without feeding it: links are then reported with
    /// `points_to` null and possible repeats are dropped.
    pub fn settle(&mut self, pass: SecondPass, out: &mut Vec<Finding>) {
        let mut settled = Vec::new();
        for l in pass.links {
            let points_to = pass.first_seen.get(&l.found).copied().filter(|&t| t < l.id);
            settled.push((
                l.id,
                Problem::BrokenLink {
                    expected: l.expected,
                    found: Some(l.found.to_string()),
                    points_to,
                },
            ));
        }
        for (d, ids) in pass.dups {
            if let Some(&first) = pass.first_seen.get(&d) {
                for id in ids.into_iter().filter(|&id| id != first) {
                    settled.push((
                        id,
                        Problem::DuplicateHash {
                            hash: d.to_string(),
                            first_id: Some(first),
                        },
                    ));
                }
            }
        }
        settled.sort_by_key(|(id, _)| *id);
        for (id, p) in settled {
            self.emit(out, Some(id), p);
        }
    }

    /// Closes the run: anchors never reached become `anchor_mismatch` (truncation), and the
    /// summary is returned. Call [`Verifier::settle`] first.
    pub fn finish(mut self, out: &mut Vec<Finding>) -> Summary {
        self.settle_erased(out);
        for (id, hash) in std::mem::take(&mut self.anchors) {
            self.summary.anchors_checked += 1;
            self.emit(
                out,
                Some(id),
                Problem::AnchorMismatch {
                    expected: hash,
                    found: None,
                },
            );
        }
        let mut s = self.summary;
        s.ok = s.findings() == 0;
        s.sha256_full_digest = format!("{:x}", self.full.finalize());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canon;

    fn chain(n: i64) -> Vec<Event> {
        let mut out: Vec<Event> = Vec::new();
        let mut scratch = Vec::new();
        for id in 1..=n {
            let prev = out.last().and_then(|e| e.hash.clone());
            let meta = canon::parse_meta("{}").unwrap();
            let content = format!("event {id}");
            let d =
                event_digest(&mut scratch, "test_event", &content, &meta, prev.as_deref()).unwrap();
            out.push(Event {
                id,
                ts: "2025-01-01T00:00:00.000000Z".into(),
                kind: "test_event".into(),
                content,
                meta: "{}".into(),
                prev_hash: prev,
                hash: Some(d.to_string()),
            });
        }
        out
    }

    fn run(events: &[Event], anchors: Vec<Anchor>) -> (Vec<Finding>, Summary) {
        let mut v = Verifier::new(anchors);
        let mut out = Vec::new();
        for e in events {
            v.check(e, None, &mut out);
        }
        if let Some(mut p) = v.second_pass() {
            for e in events {
                p.see(e.id, e.hash.as_deref());
            }
            v.settle(p, &mut out);
        }
        let s = v.finish(&mut out);
        (out, s)
    }

    #[test]
    fn clean_chain_is_ok() {
        let (f, s) = run(&chain(10), vec![]);
        assert!(f.is_empty(), "{f:?}");
        assert!(s.ok);
        assert_eq!(s.events, 10);
        assert_eq!(s.last_id, Some(10));
    }

    #[test]
    fn fork_names_its_target() {
        let mut c = chain(6);
        // Event 5 claims to follow event 3: a fork.
        let mut scratch = Vec::new();
        c[4].prev_hash = c[2].hash.clone();
        let meta = canon::parse_meta("{}").unwrap();
        c[4].hash = Some(
            event_digest(
                &mut scratch,
                "test_event",
                &c[4].content,
                &meta,
                c[4].prev_hash.as_deref(),
            )
            .unwrap()
            .to_string(),
        );
        let (f, s) = run(&c, vec![]);
        assert_eq!(s.broken_links, 2, "{f:?}");
        assert!(matches!(
            f[0].problem,
            Problem::BrokenLink {
                points_to: Some(3),
                ..
            }
        ));
        assert_eq!(s.hash_mismatches, 0);
    }

    #[test]
    fn truncation_breaks_an_anchor() {
        let c = chain(5);
        let anchor = Anchor {
            id: 5,
            hash: c[4].hash.clone().unwrap(),
        };
        let (f, s) = run(&c[..4], vec![anchor]);
        assert_eq!(s.anchor_mismatches, 1);
        assert!(matches!(
            &f[0].problem,
            Problem::AnchorMismatch { found: None, .. }
        ));
    }

    #[test]
    fn repeated_event_is_a_duplicate() {
        let mut c = chain(5);
        let copy = Event {
            id: 6,
            ..c[1].clone()
        };
        c.push(copy);
        let (_f, s) = run(&c, vec![]);
        assert_eq!(s.duplicate_hashes, 1);
        assert_eq!(s.broken_links, 1);
    }

    #[test]
    fn far_fork_and_old_repeat_are_settled_by_the_second_pass() {
        // Longer than the window, so event 5 has left it when its copy arrives.
        let mut c = chain(WINDOW as i64 + 50);
        let copy = Event {
            id: c.len() as i64 + 1,
            ..c[4].clone()
        };
        c.push(copy);
        let (f, s) = run(&c, vec![]);
        let last = c.len() as i64;
        assert_eq!(s.duplicate_hashes, 1, "{f:?}");
        assert!(f.iter().any(|x| x.id == Some(last)
            && matches!(
                x.problem,
                Problem::DuplicateHash {
                    first_id: Some(5),
                    ..
                }
            )));
        assert!(f.iter().any(|x| x.id == Some(last)
            && matches!(
                x.problem,
                Problem::BrokenLink {
                    points_to: Some(4),
                    ..
                }
            )));
        // Without a second pass (stdin), the link is still reported, pointing nowhere known.
        let mut v = Verifier::new(vec![]);
        let mut out = Vec::new();
        for e in &c {
            v.check(e, None, &mut out);
        }
        let pass = v.second_pass().expect("something to settle");
        v.settle(pass, &mut out);
        assert!(out.iter().any(|x| matches!(
            x.problem,
            Problem::BrokenLink {
                points_to: None,
                ..
            }
        )));
    }

    #[test]
    fn anchors_parse() {
        assert!("3:abc".parse::<Anchor>().is_err());
        assert!(format!("0:{}", "a".repeat(64)).parse::<Anchor>().is_err());
        assert_eq!(
            format!("7:{}", "A".repeat(64))
                .parse::<Anchor>()
                .unwrap()
                .hash,
            "a".repeat(64)
        );
    }
}
