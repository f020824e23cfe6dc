//! Whole-ledger recall: given a person's text, the past events worth showing, each with its
//! score and the reasons it was picked (SPEC §4 pmm-recall).
//!
//! Sources, each a ranked list, fused by reciprocal-rank fusion (ties broken by event id, so
//! the same ledger always gives the same answer):
//!
//! 1. **Full text** ([`text`]): BM25 over the full-text index, term by term (the text turned
//!    into plain terms by [`terms`], never passed to FTS5 as syntax), each hit lifted by the
//!    best hit of its conversation session, and each hit lending part of its score to the two
//!    messages before and after it in the same session (a question's answer is often the
//!    reply to the message that matched).
//! 2. **Concepts and threads** ([`concepts`]): the defined concepts the text mentions (the
//!    reference's CTL injector rule), the events bound to them, and the commitment threads
//!    bound to them as story windows (the reply that opened the commitment, its open and its
//!    close). A concept bound to most of the indexed events seeds nothing,
//!    and the list weighs [`concepts::WEIGHT`] in the fusion: it mostly votes again for what
//!    full text found.
//! 3. **Meaning** ([`dense`], when the query carries a vector: [`Query::dense`]): the events
//!    whose sentence-embedding vectors of the same model are nearest, ranked like full-text
//!    hits (sessions, neighbours).
//! 4. **Facts** ([`facts`]): the source messages of the facts the indexer extracted that the
//!    text names or asks about.
//! 5. **Time** ([`when`]): when the text names a date or a month ("on 9 July, 2022",
//!    "yesterday"), the events of the other sources told in that window count again, twice.
//!
//! Then **speakers** ([`speakers`]): when the text names the speaker a message is labelled
//! with ("Melanie: …"), the message's fused score counts twice. The names are left out of
//! what the sentence model is asked ([`speakers::dense_text`]): the callers that embed the
//! query do that before they hand over its vector.
//!
//! The newest messages of the conversation are not a source here: the turn always sends them
//! as chat messages ([`crate::turn`]) and excludes them through [`Query::exclude`]. A budget
//! of characters bounds what is returned.

pub mod concepts;
pub mod dense;
pub mod facts;
pub mod speakers;
pub mod terms;
pub mod text;
pub mod vectors;
pub mod via;
pub mod when;

pub use via::Via;

use crate::event::{Event, Kind};
use crate::projection::state::Projections;
use crate::store::Indexes;
use crate::Result;
use std::collections::{BTreeMap, BTreeSet};

/// Characters of recalled text a turn shows by default (about 2,000 tokens, which leaves
/// room in a small local model's context).
pub const DEFAULT_BUDGET: usize = 8_000;
/// The largest budget accepted.
pub const MAX_BUDGET: usize = crate::event::config::MAX_BUDGET as usize;
/// A recalled event's text is shown whole up to this many characters and cut past it.
/// LoCoMo's longest message has 447; at the reference's 300, 2.4 % of messages are cut, and
/// they hold the evidence for 12 % of the questions.
pub const EVIDENCE_CHARS: usize = 600;
/// Reciprocal-rank fusion's constant (the usual 60).
pub const RRF_K: f64 = 60.0;
/// A reader indexes at most this many unindexed events on the fly.
pub const MAX_UNINDEXED: u64 = 100_000;
/// How far (in ids) recall looks for the message next to an event: a full-text hit's
/// neighbours, and the reply that opened a commitment (the turn writes the open a few events
/// after the reply, other writers' events in between aside).
pub const NEIGHBOUR_WINDOW: i64 = 64;

/// What to recall.
#[derive(Debug, Clone)]
pub struct Query {
    /// The person's text.
    pub text: String,
    /// Only events with a smaller id (the turn's own message is not evidence for itself).
    pub before: i64,
    /// Characters of event text to return at most.
    pub budget: usize,
    /// At most this many events.
    pub k: Option<usize>,
    /// Only these kinds (all recalled kinds when empty).
    pub kinds: Vec<Kind>,
    /// Only events at or after this timestamp (RFC 3339, compared as the ledger stores it).
    pub since: Option<String>,
    /// Only events at or before this timestamp.
    pub until: Option<String>,
    /// Events not to return (shown elsewhere in the prompt).
    pub exclude: BTreeSet<i64>,
    /// The text's sentence-embedding vector, for the dense source (none: no dense source).
    pub dense: Option<DenseQuery>,
    /// How much of the ledger the full-text and dense sources look at: [`Depth::FULL`] (a
    /// turn's, `pmm-recall`'s) unless a caller wants less for a prompt of its own.
    pub depth: Depth,
    /// Leave out superseded events (`pmm-recall --current`): only what is believed now.
    pub current: bool,
}

/// How much of the ledger the full-text source (and the dense one, which spreads its hits
/// the same way) looks at: the postings scored per term, the hits read and ranked, the hits
/// that lend to their neighbours. Each bounds a number of reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Depth {
    /// The newest postings of one term that are scored.
    pub postings: usize,
    /// At most this many of the best hits are read and ranked (fewer when
    /// [`text::candidates`] of the budget says fewer).
    pub candidates: usize,
    /// How many of the best hits lend score to their neighbours.
    pub neighbour_hits: usize,
}

impl Depth {
    /// What recall looks at for a person's question (the figures of docs/recall.md).
    pub const FULL: Depth = Depth {
        postings: text::PER_TERM_POSTINGS,
        candidates: text::MAX_CANDIDATES,
        neighbour_hits: text::NEIGHBOUR_HITS,
    };
    /// A quarter of it or less, for the evidence of a thinking tick's prompt (a few thousand
    /// characters about the agent's own commitments, not a question to answer): 250
    /// postings a term, 100 hits, 40 that lend (a 4,000-character budget shows 20 to 40
    /// events). A term with fewer postings is scored whole, as at full depth; only a common
    /// term's older postings, whose BM25 weight is the lowest, are left out. Each posting
    /// scored costs FTS5 a document-size lookup, about 2.5 µs: at 1,000 postings a common
    /// term cost a tick 2.5 ms on a large ledger.
    pub const LIGHT: Depth = Depth {
        postings: 250,
        candidates: 100,
        neighbour_hits: 40,
    };
}

/// The query's vector and the model that made it: compared with that model's vectors only.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseQuery {
    /// The embedder's id (the stored vectors' model).
    pub model: String,
    /// The L2-normalised vector.
    pub vector: Vec<f32>,
}

impl Query {
    /// A query for `text` over the events before `before`, with the default budget.
    pub fn new(text: &str, before: i64) -> Query {
        Query {
            text: text.to_string(),
            before,
            budget: DEFAULT_BUDGET,
            k: None,
            kinds: Vec::new(),
            since: None,
            until: None,
            exclude: BTreeSet::new(),
            dense: None,
            depth: Depth::FULL,
            current: false,
        }
    }

    fn admits(&self, e: &Event) -> bool {
        e.id < self.before
            && !self.exclude.contains(&e.id)
            && (self.kinds.is_empty() || self.kinds.contains(&e.kind))
            && self.since.as_deref().is_none_or(|s| e.ts.as_str() >= s)
            && self.until.as_deref().is_none_or(|u| e.ts.as_str() <= u)
    }
}

/// One recalled event.
#[derive(Debug, Clone)]
pub struct Recalled {
    /// The event.
    pub event: Event,
    /// Its fused score (higher is better).
    pub score: f64,
    /// Why it was picked ([`Via`]): `fts`, `dense`, `neighbour-of:ID`, `concept:TOKEN`,
    /// `thread:CID`, `fact:TYPE=VALUE`, `when:DAY` or `when:FIRST..LAST`, `speaker:NAME`;
    /// `corrects:ID` for the event believed now that a superseded match brought in.
    pub via: Vec<Via>,
    /// Who corrected it, when the event is superseded (see [`supersede`]).
    pub corrected: Option<Corrected>,
}

/// A recalled event that a later event corrects (`meta.supersedes`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Corrected {
    /// The event that corrected it.
    pub by: i64,
    /// That event's actor.
    pub source: String,
    /// That event's time.
    pub ts: String,
    /// The event believed now (the end of the chain of corrections).
    pub current: i64,
}

/// One source's ranking: event ids best first, each with its reasons.
#[derive(Debug, Clone, Default)]
pub struct Ranked {
    /// `(id, reasons)`, best first.
    pub items: Vec<(i64, Vec<Via>)>,
}

/// Events read while ranking, so that filling the budget reads nothing twice.
pub type Cache = BTreeMap<i64, Event>;

/// Recalls events for `q`: the sources, fused, filled into the budget, best first.
pub fn recall<R: Indexes>(r: &R, p: &Projections, q: &Query) -> Result<Vec<Recalled>> {
    recall_with(r, p, q, &mut || None)
}

/// [`recall`] with the query's vector handed over late: when `q` has none, `vector` is asked
/// for it after the full-text and concept sources, which do not need it, have ranked (a turn
/// embeds its message on a second core meanwhile).
pub fn recall_with<R: Indexes>(
    r: &R,
    p: &Projections,
    q: &Query,
    vector: &mut dyn FnMut() -> Option<DenseQuery>,
) -> Result<Vec<Recalled>> {
    let mut cache = Cache::new();
    let text = text::rank(r, q, &mut cache)?;
    let concepts = concepts::rank(r, p, q, &mut cache)?;
    let late;
    let q = match q.dense {
        Some(_) => q,
        None => {
            late = Query {
                dense: vector(),
                ..q.clone()
            };
            &late
        }
    };
    let lists = [
        text,
        concepts,
        dense::rank(r, q, &mut cache)?,
        facts::rank(p, q),
    ];
    // The concept list is the second; the others weigh 1.
    let weights = [1.0, concepts::WEIGHT, 1.0, 1.0];
    let mut weighted: Vec<(&Ranked, f64)> = lists.iter().zip(weights).collect();
    let mut fused = fuse_weighted(&weighted);
    if let Some(time) = when::rank(r, q, &fused, &mut cache)? {
        weighted.push((&time, when::WEIGHT));
        fused = fuse_weighted(&weighted);
    }
    speakers::favour(r, q, &mut fused, &mut cache)?;
    let found = fill(r, q, fused, &mut cache)?;
    supersede(r, p, q, found)
}

/// Never shows a superseded event as if current: each comes right after the event believed
/// now in its place (brought in, with `via` `corrects:ID` and the superseded event's score,
/// when it did not match itself), labelled with who corrected it and when; with
/// [`Query::current`] it is left out. A ledger without corrections is returned as it was.
/// The events brought in may pass the budget by their text; `k` still bounds the count.
pub fn supersede<R: Indexes>(
    r: &R,
    p: &Projections,
    q: &Query,
    found: Vec<Recalled>,
) -> Result<Vec<Recalled>> {
    let s = &p.supersession;
    if s.is_empty() || !found.iter().any(|x| s.corrected(x.event.id).is_some()) {
        return Ok(found);
    }
    let index: BTreeMap<i64, usize> = found
        .iter()
        .enumerate()
        .map(|(i, x)| (x.event.id, i))
        .collect();
    let mut slots: Vec<Option<Recalled>> = found.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    let mut placed = BTreeSet::new();
    for i in 0..slots.len() {
        let Some(mut x) = slots[i].take() else {
            continue;
        };
        let id = x.event.id;
        if let Some(c) = s.corrected(id) {
            let now = s.current(id);
            let shown = now < q.before && !q.exclude.contains(&now);
            if shown && placed.insert(now) {
                let successor = match index.get(&now).and_then(|&j| slots[j].take()) {
                    Some(found) => Some(found),
                    None => r.get(now)?.map(|event| Recalled {
                        event,
                        score: x.score,
                        via: vec![Via::Corrects(id)],
                        corrected: None,
                    }),
                };
                out.extend(successor);
            }
            if q.current {
                continue;
            }
            x.corrected = Some(Corrected {
                by: c.by,
                source: c.source.clone(),
                ts: c.ts.clone(),
                current: now,
            });
        } else if !placed.insert(id) {
            continue;
        }
        out.push(x);
    }
    if let Some(k) = q.k {
        out.truncate(k);
    }
    Ok(out)
}

/// Reciprocal-rank fusion: each list adds `1 / (RRF_K + rank)` to its items; reasons are
/// merged in list order. Best first, ties by id.
pub fn fuse(lists: &[Ranked]) -> Vec<(i64, f64, Vec<Via>)> {
    let weighted: Vec<(&Ranked, f64)> = lists.iter().map(|l| (l, 1.0)).collect();
    fuse_weighted(&weighted)
}

/// [`fuse`] with a weight per list: a list adds `weight / (RRF_K + rank)` to its items.
pub fn fuse_weighted(lists: &[(&Ranked, f64)]) -> Vec<(i64, f64, Vec<Via>)> {
    let mut acc: BTreeMap<i64, (f64, Vec<Via>)> = BTreeMap::new();
    for (list, weight) in lists {
        for (rank, (id, via)) in list.items.iter().enumerate() {
            let e = acc.entry(*id).or_insert((0.0, Vec::new()));
            e.0 += weight / (RRF_K + rank as f64 + 1.0);
            for v in via {
                if !e.1.contains(v) {
                    e.1.push(v.clone());
                }
            }
        }
    }
    let mut out: Vec<(i64, f64, Vec<Via>)> =
        acc.into_iter().map(|(id, (s, v))| (id, s, v)).collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

/// Takes events in fused order while their shown text fits the budget (an event that does
/// not fit is skipped and smaller ones after it may still fit), up to `k`.
fn fill<R: Indexes>(
    r: &R,
    q: &Query,
    fused: Vec<(i64, f64, Vec<Via>)>,
    cache: &mut Cache,
) -> Result<Vec<Recalled>> {
    let mut out = Vec::new();
    let mut used = 0usize;
    for (id, score, via) in fused {
        if q.k.is_some_and(|k| out.len() >= k) || used >= q.budget {
            break;
        }
        let event = match cache.remove(&id) {
            Some(e) => e,
            None => match r.get(id)? {
                Some(e) => e,
                None => continue,
            },
        };
        if !q.admits(&event) {
            continue;
        }
        let len = shown_len(&event.content);
        if used + len > q.budget {
            continue;
        }
        used += len;
        out.push(Recalled {
            event,
            score,
            via,
            corrected: None,
        });
    }
    Ok(out)
}

/// How many characters of `content` the prompt shows.
pub fn shown_len(content: &str) -> usize {
    content.chars().count().min(EVIDENCE_CHARS)
}

/// Seconds since the epoch of a ledger timestamp (RFC 3339), if it parses.
pub(crate) fn epoch(ts: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(ts)
        .ok()
        .map(|t| t.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusion_adds_reciprocal_ranks_and_breaks_ties_by_id() {
        let a = Ranked {
            items: vec![(5, vec![Via::Fts]), (3, vec![Via::Fts])],
        };
        let x = || vec![Via::Concept("x".into())];
        let b = Ranked {
            items: vec![(3, x()), (5, x())],
        };
        let f = fuse(&[a, b]);
        assert_eq!(f.iter().map(|x| x.0).collect::<Vec<_>>(), [3, 5]);
        assert_eq!(f[0].2, [Via::Fts, Via::Concept("x".into())]);
    }
}
