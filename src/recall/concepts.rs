//! The concept source: the defined concepts a text mentions (the reference's CTL injector
//! rule, FORMATS.md §9.6), the events bound to them, and the commitment threads bound to them
//! as story windows: the reply that opened the commitment, its open and its close.

use super::{Cache, Query, Ranked, Via, NEIGHBOUR_WINDOW};
use crate::projection::state::Projections;
use crate::store::Indexes;
use crate::Result;
use std::collections::BTreeSet;

/// The newest events per mentioned concept that are recalled.
pub const EVENTS_PER_CONCEPT: usize = 8;
/// The newest threads per mentioned concept that are recalled.
pub const THREADS_PER_CONCEPT: usize = 4;
/// The concept list's weight in the fusion (the other sources weigh 1): a concept the text
/// mentions is mostly one of its words, which the full-text source already matches, so its
/// list is a second, coarser vote on much the same events (docs/recall.md, "concepts from the
/// indexer": at weight 1 it displaced better hits).
pub const WEIGHT: f64 = 0.5;
/// A mentioned concept bound to more than this share of the events bound to any concept
/// (before the query) is not evidence of anything and seeds nothing: like a word in more than
/// half of the documents, whose BM25 weight is zero or less. A speaker's name, which the
/// indexer's rule 2 bound to every message that speaker labels, is the usual one; so is any
/// concept a reply header puts on most replies.
pub const MAX_SHARE: f64 = 0.5;
/// A concept bound to at most this many events is never left out by [`MAX_SHARE`]: in a
/// ledger with few bindings a share says little, and all its events fit the list anyway.
pub const MIN_COMMON: usize = EVENTS_PER_CONCEPT;

/// Segments too generic to match a concept on their own (FORMATS.md §9.6).
const GENERIC_SEGMENTS: [&str; 7] = ["meta", "root", "core", "base", "type", "kind", "value"];
/// Words that stand for the user's identity concept.
const CREATOR_WORDS: [&str; 5] = ["creator", "author", "builder", "maker", "founder"];

/// The defined concept tokens the user's text mentions (FORMATS.md §9.6): a token matches if
/// it occurs in the lowercased text, or if its last dot-segment (unless generic) is one of the
/// text's words or all of that segment's alphanumeric parts are; creator words bring in
/// `user.identity`. Sorted.
pub fn mentioned_concepts(defined: &[String], text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let words: BTreeSet<String> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    let mut out = BTreeSet::new();
    for tok in defined {
        let t = tok.to_lowercase();
        if t.is_empty() {
            continue;
        }
        let last = t.rsplit('.').next().unwrap_or("");
        let parts: Vec<&str> = last
            .split(|c: char| !c.is_alphanumeric())
            .filter(|p| !p.is_empty())
            .collect();
        let by_segment = !last.is_empty()
            && !GENERIC_SEGMENTS.contains(&last)
            && (words.contains(last)
                || (!parts.is_empty() && parts.iter().all(|p| words.contains(*p))));
        if lower.contains(&t) || by_segment {
            out.insert(tok.clone());
        }
    }
    if CREATOR_WORDS.iter().any(|w| words.contains(*w))
        && defined.iter().any(|t| t == "user.identity")
    {
        out.insert("user.identity".into());
    }
    out.into_iter().collect()
}

/// How many of a concept's newest bound events are looked at.
pub const CANDIDATES_PER_CONCEPT: usize = 64;

/// The concept and thread ranking for `q`. The mentioned concepts bound to more than
/// [`MAX_SHARE`] of the indexed events (and more than [`MIN_COMMON`]) are left out. Then, when
/// the text mentions one concept, its newest bound
/// events; when it mentions several, the events bound to two or more of them (among each one's
/// newest [`CANDIDATES_PER_CONCEPT`]) — what a question about two things is about — those
/// bound to more of them and to rarer ones first (each concept weighs `ln(events before the
/// query / its bound events)`; ties newest first); at most [`EVENTS_PER_CONCEPT`]. Then, per
/// mentioned concept (sorted), its threads' story windows, newest first. An event bound to one
/// of several mentioned concepts is left to the other sources: on the LoCoMo conversations,
/// each concept's newest events displaced better hits.
pub fn rank<R: Indexes>(r: &R, p: &Projections, q: &Query, cache: &mut Cache) -> Result<Ranked> {
    let mut items: Vec<(i64, Vec<Via>)> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut push = |id: i64, why: Via, items: &mut Vec<(i64, Vec<Via>)>| {
        if id >= 1 && id < q.before && seen.insert(id) {
            items.push((id, vec![why]));
        }
    };
    let indexed = p.concepts.bound_events_before(q.before);
    let mut bindings: Vec<(String, Vec<i64>)> = Vec::new();
    for token in mentioned_concepts(&p.concepts.all_tokens(), &q.text) {
        let bound: Vec<i64> = p
            .concepts
            .events_for_concept(&token, None)
            .into_iter()
            .filter(|id| *id < q.before)
            .collect();
        if !too_common(bound.len(), indexed) {
            bindings.push((token, bound));
        }
    }
    let mut scores: std::collections::BTreeMap<i64, (f64, String, usize)> = Default::default();
    let single = bindings.len() == 1;
    for (token, bound) in &bindings {
        if bound.is_empty() {
            continue;
        }
        let weight = ((q.before.max(2) as f64) / bound.len() as f64)
            .ln()
            .max(0.01);
        for id in bound.iter().rev().take(CANDIDATES_PER_CONCEPT) {
            let e = scores.entry(*id).or_insert((0.0, token.clone(), 0));
            e.0 += weight;
            e.2 += 1;
        }
    }
    let mut ranked: Vec<(f64, i64, String)> = scores
        .into_iter()
        .filter(|(_, (_, _, n))| *n >= 2 || single)
        .map(|(id, (score, token, _))| (score, id, token))
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    let keep = EVENTS_PER_CONCEPT;
    for (_, id, token) in ranked.into_iter().take(keep) {
        push(id, Via::Concept(token), &mut items);
    }
    for (token, _) in bindings {
        let mut threads: Vec<(i64, String, Option<i64>)> = p
            .concepts
            .resolve_cids_for_concepts(&[token.as_str()])
            .into_iter()
            .filter_map(|cid| {
                let c = p
                    .mirror
                    .open
                    .get(&cid)
                    .or_else(|| p.mirror.closed.get(&cid))?;
                Some((c.opened_at, cid, c.closed_at))
            })
            .collect();
        threads.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (opened, cid, closed) in threads.into_iter().take(THREADS_PER_CONCEPT) {
            let why = Via::Thread(cid);
            if let Some(reply) = r
                .adjacent(opened, &crate::event::MESSAGES, 1, false, NEIGHBOUR_WINDOW)?
                .pop()
            {
                push(reply.id, why.clone(), &mut items);
                cache.entry(reply.id).or_insert(reply);
            }
            push(opened, why.clone(), &mut items);
            if let Some(c) = closed {
                push(c, why, &mut items);
            }
        }
    }
    Ok(Ranked { items })
}

/// Whether a concept bound to `bound` of the `indexed` events bound to any concept is too
/// common to seed recall ([`MAX_SHARE`], [`MIN_COMMON`]).
pub fn too_common(bound: usize, indexed: usize) -> bool {
    bound > MIN_COMMON && bound as f64 > MAX_SHARE * indexed as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_concept_on_most_indexed_events_is_too_common() {
        // A speaker's name on 331 of 419 messages; a topic on 33.
        assert!(too_common(331, 419));
        assert!(!too_common(33, 419));
        // Exactly half is not more than half.
        assert!(!too_common(200, 400));
        // A handful of bindings is never too common, whatever the share.
        assert!(!too_common(MIN_COMMON, MIN_COMMON));
        assert!(too_common(MIN_COMMON + 1, MIN_COMMON + 1));
    }
}
