//! The full-text source: BM25 term by term, lifted by the session, shared with neighbours.
//!
//! 1. Every term's postings are scored by FTS5's BM25 (k1 1.2, b 0.75) and summed per event:
//!    the same sum as one `OR` query, but each term's work is bounded ([`PER_TERM_POSTINGS`]).
//! 2. The best [`candidates`] are read (more for a larger budget) and grouped into sessions: runs of hits whose
//!    timestamps are at most [`SESSION_GAP_SECS`] apart. Each hit's value is its score plus
//!    [`SESSION_WEIGHT`] times its session's best score, over the best score: a session that
//!    matches the question strongly lifts its weaker hits.
//! 3. Each of the best [`NEIGHBOUR_HITS`] lends [`NEIGHBOUR_SHARES`] of its value to the one
//!    and two messages before and after it in the same session.
//!
//! The weights were chosen on the LoCoMo dev conversations (docs/recall.md has the table);
//! they are few and coarse on purpose, so that they carry over to other conversations.

use super::{epoch, terms, Cache, Query, Ranked, Via, MAX_UNINDEXED, NEIGHBOUR_WINDOW};
use crate::store::Indexes;
use crate::Result;
use std::collections::BTreeMap;

/// The newest postings of one term that are scored (a term in more events has little weight).
pub const PER_TERM_POSTINGS: usize = 5_000;
/// How many of the best hits are read and ranked at the default budget and below.
pub const CANDIDATES: usize = 400;
/// Characters of budget per candidate above the default budget: a recalled message shows 100
/// to 200 characters, so a budget of `b` shows `b / 150` or so, and `b / 20` candidates give
/// the session lift and the neighbours several times what can be shown to choose from.
pub const BUDGET_PER_CANDIDATE: usize = 20;
/// The most hits read and ranked, whatever the budget.
pub const MAX_CANDIDATES: usize = 4_000;

/// How many of the best hits are read and ranked for a budget of `budget` characters:
/// [`CANDIDATES`], or `budget / BUDGET_PER_CANDIDATE` when that is more (at 16,000 characters,
/// 800: on the LoCoMo dev conversations all-evidence recall went from 83.3 to 83.9 %; at
/// 8,000 and below nothing changes), at most [`MAX_CANDIDATES`].
pub fn candidates(budget: usize) -> usize {
    (budget / BUDGET_PER_CANDIDATE).clamp(CANDIDATES, MAX_CANDIDATES)
}
/// How many of the best hits lend score to their neighbours.
pub const NEIGHBOUR_HITS: usize = 150;
/// What a hit lends to the messages 1 and 2 away from it.
pub const NEIGHBOUR_SHARES: [f64; 2] = [0.5, 0.25];
/// How much a session's best hit lifts the others.
pub const SESSION_WEIGHT: f64 = 0.3;
/// Messages further apart than this (seconds) belong to different sessions.
pub const SESSION_GAP_SECS: i64 = 3_600;

/// The full-text ranking for `q`.
pub fn rank<R: Indexes>(r: &R, q: &Query, cache: &mut Cache) -> Result<Ranked> {
    let scores = bm25(r, q)?;
    spread(r, q, cache, scores.into_iter().collect(), Via::Fts)
}

/// Ranks scored hits (`(id, score)`, higher is better) as steps 2 and 3 of the module docs
/// describe: the best [`candidates`] lifted by their sessions, the best [`NEIGHBOUR_HITS`]
/// lending to their neighbours. Each hit's reasons start with `via`. Shared with the dense
/// source, whose hits want the same context.
pub fn spread<R: Indexes>(
    r: &R,
    q: &Query,
    cache: &mut Cache,
    mut best: Vec<(i64, f64)>,
    via: Via,
) -> Result<Ranked> {
    if best.is_empty() {
        return Ok(Ranked::default());
    }
    best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    best.truncate(candidates(q.budget).min(q.depth.candidates));
    for (id, _) in &best {
        if !cache.contains_key(id) {
            if let Some(e) = r.get(*id)? {
                cache.insert(*id, e);
            }
        }
    }
    best.retain(|(id, _)| cache.contains_key(id));
    let values = session_values(&best, cache);
    let mut total: BTreeMap<i64, (f64, Vec<Via>)> = BTreeMap::new();
    for (id, v) in &values {
        let t = total.entry(*id).or_default();
        t.0 += v;
        t.1.insert(0, via.clone());
    }
    let mut order: Vec<(i64, f64)> = values.clone();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    for (id, v) in order.into_iter().take(q.depth.neighbour_hits) {
        lend_to_neighbours(r, q, cache, id, v, &mut total)?;
    }
    let mut items: Vec<(i64, f64, Vec<Via>)> = total
        .into_iter()
        .map(|(id, (s, via))| (id, s, via))
        .collect();
    items.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(Ranked {
        items: items.into_iter().map(|(id, _, via)| (id, via)).collect(),
    })
}

/// BM25 per event, summed over the query's terms (in the terms' order, so sums are
/// reproducible to the bit).
fn bm25<R: Indexes>(r: &R, q: &Query) -> Result<BTreeMap<i64, f64>> {
    let terms = terms::query_terms(&q.text);
    let mut scores: BTreeMap<i64, f64> = BTreeMap::new();
    if terms.is_empty() {
        return Ok(scores);
    }
    let index = r.text_index(MAX_UNINDEXED)?;
    for term in &terms {
        for (id, s) in index.term_hits(term, q.before, q.depth.postings)? {
            if !q.exclude.contains(&id) {
                *scores.entry(id).or_insert(0.0) += s;
            }
        }
    }
    Ok(scores)
}

/// Each hit's value: (its score + SESSION_WEIGHT × its session's best) / the best score.
fn session_values(best: &[(i64, f64)], cache: &Cache) -> Vec<(i64, f64)> {
    let top = best.first().map_or(1.0, |b| b.1).max(f64::MIN_POSITIVE);
    let mut by_id: Vec<(i64, f64, Option<i64>)> = best
        .iter()
        .map(|(id, s)| (*id, *s, cache.get(id).and_then(|e| epoch(&e.ts))))
        .collect();
    by_id.sort_by_key(|x| x.0);
    // Sessions: runs of hits (in id order) with no gap longer than SESSION_GAP_SECS.
    let mut session = vec![0usize; by_id.len()];
    for i in 1..by_id.len() {
        let gap = match (by_id[i - 1].2, by_id[i].2) {
            (Some(a), Some(b)) => (b - a).abs() > super::text::SESSION_GAP_SECS,
            _ => false,
        };
        session[i] = session[i - 1] + usize::from(gap);
    }
    let mut session_best = vec![0.0f64; session.last().map_or(0, |s| s + 1)];
    for (i, x) in by_id.iter().enumerate() {
        session_best[session[i]] = session_best[session[i]].max(x.1);
    }
    by_id
        .iter()
        .enumerate()
        .map(|(i, x)| (x.0, (x.1 + SESSION_WEIGHT * session_best[session[i]]) / top))
        .collect()
}

/// Adds `value × share` to the messages 1 and 2 before and after `id` in the same session.
fn lend_to_neighbours<R: Indexes>(
    r: &R,
    q: &Query,
    cache: &mut Cache,
    id: i64,
    value: f64,
    total: &mut BTreeMap<i64, (f64, Vec<Via>)>,
) -> Result<()> {
    let Some(hit_ts) = cache.get(&id).map(|e| epoch(&e.ts)) else {
        return Ok(());
    };
    for forward in [false, true] {
        let near = r.adjacent(
            id,
            &crate::event::MESSAGES,
            NEIGHBOUR_SHARES.len(),
            forward,
            NEIGHBOUR_WINDOW,
        )?;
        let mut last_ts = hit_ts;
        for (share, e) in NEIGHBOUR_SHARES.iter().zip(near) {
            let ts = epoch(&e.ts);
            if let (Some(a), Some(b)) = (last_ts, ts) {
                if (b - a).abs() > SESSION_GAP_SECS {
                    break;
                }
            }
            last_ts = ts;
            // An erased message lends its place in the session, not its (gone) text.
            if e.id >= q.before || q.exclude.contains(&e.id) || e.is_blank() {
                continue;
            }
            let t = total.entry(e.id).or_default();
            t.0 += value * share;
            let reason = Via::NeighbourOf(id);
            if t.1.len() < 4 && !t.1.contains(&reason) {
                t.1.push(reason);
            }
            cache.entry(e.id).or_insert(e);
        }
    }
    Ok(())
}
