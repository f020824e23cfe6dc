//! The concept source: the defined concepts a text mentions (the reference's CTL injector
//! rule, FORMATS.md §9.6), the events bound to them, and the commitment threads bound to them
//! as story windows: the reply that opened the commitment, its open and its close.

use super::{text::MESSAGE_KINDS, Cache, Query, Ranked};
use crate::projection::state::Projections;
use crate::store::Reads;
use crate::Result;
use std::collections::BTreeSet;

/// The newest events per mentioned concept that are recalled.
pub const EVENTS_PER_CONCEPT: usize = 8;
/// The newest threads per mentioned concept that are recalled.
pub const THREADS_PER_CONCEPT: usize = 4;

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

/// The concept and thread ranking for `q`: per mentioned concept (sorted), its newest bound
/// events, then its threads' story windows, newest first.
pub fn rank<R: Reads>(r: &R, p: &Projections, q: &Query, cache: &mut Cache) -> Result<Ranked> {
    let mut items: Vec<(i64, Vec<String>)> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut push = |id: i64, why: String, items: &mut Vec<(i64, Vec<String>)>| {
        if id >= 1 && id < q.before && seen.insert(id) {
            items.push((id, vec![why]));
        }
    };
    for token in mentioned_concepts(&p.concepts.all_tokens(), &q.text) {
        let bound = p.concepts.events_for_concept(&token, None);
        for id in bound
            .iter()
            .rev()
            .filter(|id| **id < q.before)
            .take(EVENTS_PER_CONCEPT)
        {
            push(*id, format!("concept:{token}"), &mut items);
        }
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
            let why = format!("thread:{cid}");
            if let Some(reply) = r.adjacent(opened, &MESSAGE_KINDS, 1, false, 64)?.pop() {
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
