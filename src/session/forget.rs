//! Forgetting by subject: the events a selection names (what recall finds for a text above a
//! score, the events bound to a concept, those an actor wrote, those of a span of time), and
//! the later events that quote them, to be erased together in one transaction ([`super::erase`]).
//!
//! Only what can be erased is selected: never an `erasure` event, an event already erased or
//! one without a hash. The selection is read from one snapshot of the ledger and the
//! projections as of it; the erasure's own transaction checks every id again.

use crate::event::Kind;
use crate::projection::concepts::THREAD_BINDING_EVENT_ID;
use crate::projection::state::Projections;
use crate::recall::{self, Query, Via};
use crate::store::{EventLog, Filter, Indexes, Ledger};
use std::collections::{BTreeMap, BTreeSet};

/// One way to name the events to forget.
#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    /// The events recall finds for `text` whose fused score is at least `min_score` (events
    /// recall brings in only because they correct a match are not taken).
    Query {
        /// The text.
        text: String,
        /// The lowest fused score taken.
        min_score: f64,
    },
    /// The events bound to a concept token (alias-resolved).
    Concept(String),
    /// The events whose `meta.source` is this actor.
    Source(String),
    /// The events whose time is in `from..=to` (RFC 3339, compared as the ledger stores them).
    Range {
        /// The first time.
        from: String,
        /// The last time.
        to: String,
    },
}

impl Subject {
    /// How a selected event's reason is printed: `query`, `concept:TOKEN`, `source:ACTOR`,
    /// `range`.
    pub fn label(&self) -> String {
        match self {
            Subject::Query { .. } => "query".into(),
            Subject::Concept(t) => format!("concept:{t}"),
            Subject::Source(a) => format!("source:{a}"),
            Subject::Range { .. } => "range".into(),
        }
    }
}

/// `FROM..TO` as two ledger timestamps (RFC 3339 times or `YYYY-MM-DD` dates: a date as
/// FROM is its first moment, as TO its last), or why not.
pub fn parse_range(text: &str) -> Result<(String, String), String> {
    let Some((from, to)) = text.split_once("..") else {
        return Err(format!("'{text}' is not FROM..TO"));
    };
    let time = |s: &str, end: bool| -> Result<String, String> {
        let s = s.trim();
        let full = match (s.len(), end) {
            (10, false) => format!("{s}T00:00:00Z"),
            (10, true) => format!("{s}T23:59:59.999999Z"),
            _ => s.to_string(),
        };
        chrono::DateTime::parse_from_rfc3339(&full)
            .map(|t| crate::event::format_ts(t.with_timezone(&chrono::Utc)))
            .map_err(|_| format!("'{s}' is not an RFC 3339 time or a YYYY-MM-DD date"))
    };
    let (from, to) = (time(from, false)?, time(to, true)?);
    if from > to {
        return Err(format!("{from} is after {to}"));
    }
    Ok((from, to))
}

/// The ids a set of subjects selects, each with the first subject that named it, in id order.
pub type Selection = BTreeMap<i64, String>;

/// The events `subjects` name on `r` (projections `p` as of its head), without those that
/// cannot be erased.
pub fn select<R: Indexes>(
    r: &R,
    p: &Projections,
    subjects: &[Subject],
) -> crate::Result<Selection> {
    let mut out = Selection::new();
    for s in subjects {
        let label = s.label();
        for id in named(r, p, s)? {
            out.entry(id).or_insert_with(|| label.clone());
        }
    }
    let gone = erased(r)?;
    out.retain(|id, _| !gone.contains(id));
    Ok(out)
}

/// The ids one subject names, unfiltered.
fn named<R: Indexes>(r: &R, p: &Projections, s: &Subject) -> crate::Result<Vec<i64>> {
    match s {
        Subject::Query { text, min_score } => {
            let q = Query {
                budget: recall::MAX_BUDGET,
                ..Query::new(text, i64::MAX)
            };
            let found = recall::recall(r, p, &q)?;
            Ok(found
                .into_iter()
                .filter(|x| x.score >= *min_score)
                .filter(|x| !x.via.iter().all(|v| matches!(v, Via::Corrects(_))))
                .map(|x| x.event.id)
                .collect())
        }
        Subject::Concept(token) => Ok(p
            .concepts
            .events_for_concept(token, None)
            .into_iter()
            .filter(|&id| id != THREAD_BINDING_EVENT_ID && id > 0)
            .collect()),
        Subject::Source(actor) => scan_ids(r, &mut |e| {
            e.kind != Kind::Erasure
                && crate::event::Seen::new(e).meta_object().is_some_and(|m| {
                    m.get("source").and_then(serde_json::Value::as_str) == Some(actor.as_str())
                })
        }),
        Subject::Range { from, to } => scan_ids(r, &mut |e| {
            e.kind != Kind::Erasure
                && e.ts.as_str() >= from.as_str()
                && e.ts.as_str() <= to.as_str()
        }),
    }
}

/// The ids of the events for which `keep` holds, in one pass over the ledger.
fn scan_ids<R: Indexes>(
    r: &R,
    keep: &mut dyn FnMut(&crate::event::Event) -> bool,
) -> crate::Result<Vec<i64>> {
    let mut ids = Vec::new();
    r.scan(&Filter::default(), &mut |e| {
        if keep(&e) && e.hash.as_deref().is_some_and(|h| !h.is_empty()) {
            ids.push(e.id);
        }
        Ok(true)
    })?;
    Ok(ids)
}

/// The erasure events and the events they erased: none of them can be erased.
fn erased<R: Indexes>(r: &R) -> crate::Result<BTreeSet<i64>> {
    let mut gone = BTreeSet::new();
    let filter = Filter {
        kinds: vec![Kind::Erasure],
        ..Filter::default()
    };
    r.scan(&filter, &mut |e| {
        gone.insert(e.id);
        if let Some(id) = crate::store::erased_id(&e.meta) {
            gone.insert(id);
        }
        Ok(true)
    })?;
    Ok(gone)
}

/// The later events that quote the selected ones (see `sqlite::Ledger::quoting_many`), without the
/// selected ones themselves and those already erased: quoted id → quoting ids.
pub fn quotes(ledger: &Ledger, selected: &Selection) -> crate::Result<BTreeMap<i64, Vec<i64>>> {
    let mut targets = Vec::with_capacity(selected.len());
    for &id in selected.keys() {
        if let Some(e) = ledger.get(id)? {
            targets.push((id, e.content));
        }
    }
    let gone = erased(ledger)?;
    let mut found = ledger.quoting_many(&targets)?;
    for list in found.values_mut() {
        list.retain(|q| !selected.contains_key(q) && !gone.contains(q));
    }
    found.retain(|_, list| !list.is_empty());
    Ok(found)
}
