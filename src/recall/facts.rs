//! The facts source: what the indexer extracted from messages (`claim_from_text`: a name, a
//! place, a tool; FORMATS.md §14.5), kept by the autonomy projection. A question that names a
//! fact's value, or asks about its kind ("name", "live", "use" …), recalls the message the fact
//! was extracted from, newest first, with the reason `fact:<claim_type>=<value>`.

use super::{Query, Ranked, Via};
use crate::projection::state::Projections;
use std::collections::BTreeSet;

/// The most messages this source recalls.
pub const MAX_FACTS: usize = 8;

/// Words that ask about each kind of fact.
const ASKS: [(&str, &[&str]); 3] = [
    ("user.identity.name", &["name", "called", "who"]),
    (
        "user.location",
        &[
            "live", "lives", "living", "where", "location", "city", "from",
        ],
    ),
    (
        "user.tool_usage",
        &["use", "uses", "using", "tool", "tools"],
    ),
];

/// The facts ranking for `q`: the source messages of the facts it asks about or names.
pub fn rank(p: &Projections, q: &Query) -> Ranked {
    let words: BTreeSet<String> = q
        .text
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    let asks = |t: &str| {
        ASKS.iter()
            .any(|(k, ws)| *k == t && ws.iter().any(|w| words.contains(*w)))
    };
    let mut items: Vec<(i64, Vec<Via>)> = Vec::new();
    for f in p.autonomy.facts.iter().rev() {
        if items.len() >= MAX_FACTS {
            break;
        }
        let named = f.value.split_whitespace().any(|w| words.contains(w));
        if f.source >= q.before || !(named || asks(&f.claim_type)) {
            continue;
        }
        let why = Via::Fact {
            claim_type: f.claim_type.clone(),
            value: f.value.clone(),
        };
        match items.iter_mut().find(|(id, _)| *id == f.source) {
            Some((_, via)) => via.push(why),
            None => items.push((f.source, vec![why])),
        }
    }
    Ranked { items }
}
