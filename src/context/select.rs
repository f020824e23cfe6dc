//! Retrieval: which past events a turn shows the model (SPEC §4 pmm-turn, FORMATS.md §9).
//!
//! Bounded by construction: `fixed` reads the newest `limit` messages; `vector` scores the
//! newest [`VECTOR_WINDOW`] messages against the user's text with hash64 (§9.2) and pins the
//! newest [`PINNED_MEMORIES`] `lifetime_memory` chunks. Neither looks further back, whatever
//! the ledger's size. Unlike the reference (§17 item 26) the recorded strategy is the one
//! used, the scores are the real ones, and `fixed` runs no vector pipeline.

use super::embed::{self, Hash64};
use crate::event::config::Strategy;
use crate::event::{Event, Kind, MESSAGE_KINDS};
use crate::projection::state::Projections;
use crate::recall::{self, Query};
use crate::store::{Filter, Indexes};
use crate::Result;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;

/// How many recent messages the vector strategy scores.
pub const VECTOR_WINDOW: usize = 100;
/// How many of the newest lifetime-memory chunks the vector strategy always includes.
pub const PINNED_MEMORIES: usize = 2;

/// The retrieval config in force (the newest `config` of type `retrieval`, FORMATS.md §9.1).
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalConfig {
    /// `hybrid` (whole-ledger recall, [`crate::recall`]), `vector` or `fixed` (the
    /// reference's, bounded to recent windows).
    pub strategy: Strategy,
    /// Characters of recalled text under `hybrid`.
    pub budget: usize,
    /// How many messages to select.
    pub limit: usize,
    /// Embedding model label (`hash64`).
    pub model: String,
    /// Embedding dimensions.
    pub dims: i64,
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        RetrievalConfig {
            strategy: Strategy::Vector,
            budget: crate::recall::DEFAULT_BUDGET,
            limit: 7,
            model: embed::MODEL.into(),
            dims: embed::DEFAULT_DIMS as i64,
        }
    }
}

impl RetrievalConfig {
    /// The default config content, written on a ledger's first turn: the reference's keys and
    /// values, but the `hybrid` strategy (whole-ledger recall) and its `budget`.
    pub const DEFAULT_CONTENT: &'static str = r#"{"budget":8000,"dims":64,"limit":7,"model":"hash64","quant":"none","strategy":"hybrid","type":"retrieval"}"#;

    /// Reads a `retrieval` config's content; missing or odd fields keep their defaults, as in
    /// the reference (a missing `limit` means 20; a non-positive one keeps the default).
    pub fn from_config(config: Option<&Value>) -> RetrievalConfig {
        let mut c = RetrievalConfig::default();
        let Some(Value::Object(m)) = config else {
            return c;
        };
        // An unknown strategy keeps the default.
        if let Some(s) = m
            .get("strategy")
            .and_then(Value::as_str)
            .and_then(Strategy::parse)
        {
            c.strategy = s;
        }
        match m.get("limit").and_then(Value::as_i64) {
            Some(n) if n > 0 => c.limit = n.min(crate::event::config::MAX_LIMIT) as usize,
            Some(_) => {}
            None => c.limit = 20,
        }
        if let Some(s) = m.get("model").and_then(Value::as_str) {
            c.model = s.into();
        }
        // Values beyond the ranges a write is held to (an imported ledger's) keep the
        // default: the dimensions size every vector a turn computes.
        if let Some(n) = m.get("dims").and_then(Value::as_i64) {
            if n <= crate::event::config::MAX_DIMS {
                c.dims = n;
            }
        }
        if let Some(n) = m.get("budget").and_then(Value::as_u64) {
            c.budget = (n as usize).clamp(1, crate::recall::MAX_BUDGET);
        }
        c
    }

    /// Whether turns embed their messages (`embedding_add`, hash64): as the reference does
    /// for the vector strategy, and under `hybrid` too, so that a reference reader of the
    /// ledger still finds its vectors.
    pub fn embeds(&self) -> bool {
        matches!(self.strategy, Strategy::Vector | Strategy::Hybrid)
    }
}

/// What retrieval chose for one turn.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Selected ids in bucket order (pinned memories, then hits best first).
    pub selected: Vec<i64>,
    /// One score per selected id (0.0 under `fixed`).
    pub scores: Vec<f64>,
    /// The selected events, ascending by id (the Evidence section's order); shared, so that
    /// a reader that keeps events (`--deep`'s prompt check) hands out its copy.
    pub events: Vec<Arc<Event>>,
    /// Per selected id (same order as `selected`), why it was recalled; empty for the
    /// reference's strategies.
    pub via: Vec<Vec<Via>>,
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Selects the context for a user message whose event id is `user_id` (earlier events only).
pub fn select<R: Indexes>(
    r: &R,
    cfg: &RetrievalConfig,
    query: &str,
    user_id: i64,
) -> Result<Selection> {
    let messages = Filter {
        until: Some(user_id - 1),
        kinds: MESSAGE_KINDS.iter().map(|k| Kind::from(*k)).collect(),
        ..Filter::default()
    };
    let mut picked: Vec<(Event, f64)> = Vec::new();
    if cfg.strategy == Strategy::Fixed {
        let mut recent = r.tail(&messages, cfg.limit)?;
        recent.reverse();
        picked.extend(recent.into_iter().map(|e| (e, 0.0)));
    } else {
        let dims = usize::try_from(cfg.dims).unwrap_or(embed::DEFAULT_DIMS);
        let mut embedder = Hash64::new(dims);
        let q = embedder.vector(query);
        let mut score = |e: &Event| dot(&q, &embedder.vector(&e.content));
        let memories = Filter {
            until: Some(user_id - 1),
            kinds: vec![Kind::LifetimeMemory],
            ..Filter::default()
        };
        let mut pinned = r.tail(&memories, PINNED_MEMORIES)?;
        pinned.reverse();
        for e in pinned {
            let s = score(&e);
            picked.push((e, s));
        }
        let mut hits: Vec<(Event, f64)> = r
            .tail(&messages, VECTOR_WINDOW)?
            .into_iter()
            .map(|e| {
                let s = score(&e);
                (e, s)
            })
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.id.cmp(&b.0.id)));
        hits.truncate(cfg.limit.max(1));
        picked.extend(hits);
    }
    let selected = picked.iter().map(|(e, _)| e.id).collect();
    let scores = picked.iter().map(|(_, s)| *s).collect();
    let mut events: Vec<Arc<Event>> = picked.into_iter().map(|(e, _)| Arc::new(e)).collect();
    events.sort_by_key(|e| e.id);
    Ok(Selection {
        selected,
        scores,
        events,
        via: Vec::new(),
    })
}

/// The newest messages before `user_id`, oldest first: at most `n`, and no more than
/// `max_chars` of text in all (the oldest are dropped first). A turn sends them as chat
/// messages whatever the strategy, so the model always sees what was just said.
pub fn history<R: Indexes>(r: &R, user_id: i64, n: usize, max_chars: usize) -> Result<Vec<Event>> {
    let recent = r.tail(
        &Filter {
            until: Some(user_id - 1),
            kinds: MESSAGE_KINDS.iter().map(|k| Kind::from(*k)).collect(),
            ..Filter::default()
        },
        n,
    )?;
    Ok(within(recent, max_chars))
}

/// The newest of `recent` (oldest first) that fit in `max_chars` characters together, oldest
/// first: [`history`]'s budget.
pub fn within(recent: Vec<Event>, max_chars: usize) -> Vec<Event> {
    let mut used = 0;
    let mut kept: Vec<Event> = Vec::new();
    for e in recent.into_iter().rev() {
        used += e.content.chars().count();
        if used > max_chars {
            break;
        }
        kept.push(e);
    }
    kept.reverse();
    kept
}

/// The `hybrid` strategy: whole-ledger recall ([`crate::recall`]) within `budget` characters,
/// leaving out `exclude` (the history the turn sends anyway).
pub fn select_hybrid<R: Indexes>(
    r: &R,
    p: &Projections,
    query: &str,
    user_id: i64,
    budget: usize,
    exclude: BTreeSet<i64>,
    dense: &mut dyn FnMut() -> Option<recall::DenseQuery>,
) -> Result<Selection> {
    select_hybrid_at(
        r,
        p,
        query,
        user_id,
        budget,
        exclude,
        dense,
        recall::Depth::FULL,
    )
}

/// How much of the ledger [`select_hybrid_at`] looks at ([`recall::Depth`]).
pub use crate::recall::Depth;
/// Why a recalled event was selected ([`Selection::via`]).
pub use crate::recall::Via;

/// [`select_hybrid`] looking at `depth` of the ledger ([`recall::Depth::LIGHT`]: a thinking
/// tick's evidence).
#[allow(clippy::too_many_arguments)]
pub fn select_hybrid_at<R: Indexes>(
    r: &R,
    p: &Projections,
    query: &str,
    user_id: i64,
    budget: usize,
    exclude: BTreeSet<i64>,
    dense: &mut dyn FnMut() -> Option<recall::DenseQuery>,
    depth: recall::Depth,
) -> Result<Selection> {
    let q = Query {
        budget,
        exclude,
        depth,
        ..Query::new(query, user_id)
    };
    let recalled = recall::recall_with(r, p, &q, dense)?;
    let selected = recalled.iter().map(|x| x.event.id).collect();
    let scores = recalled.iter().map(|x| x.score).collect();
    let via = recalled.iter().map(|x| x.via.clone()).collect();
    let mut events: Vec<Arc<Event>> = recalled.into_iter().map(|x| Arc::new(x.event)).collect();
    events.sort_by_key(|e| e.id);
    Ok(Selection {
        selected,
        scores,
        events,
        via,
    })
}
