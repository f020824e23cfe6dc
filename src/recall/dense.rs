//! The dense source: the events whose sentence-embedding vectors are nearest to the query's
//! (cosine, the model's own vectors only: [`crate::store::vectors`]), ranked as full-text hits
//! are (lifted by their sessions, lending to their neighbours: [`super::text::spread`]). Full
//! text misses what is said in other words ("painting" and "the canvas she finished"); this
//! finds it.

use super::{text, Cache, Query, Ranked};
use crate::store::Reads;
use crate::Result;

/// How many nearest vectors are ranked.
pub const NEAREST: usize = 200;

/// The dense ranking for `q` (empty without a query vector).
pub fn rank<R: Reads>(r: &R, q: &Query, cache: &mut Cache) -> Result<Ranked> {
    let Some(d) = &q.dense else {
        return Ok(Ranked::default());
    };
    let mut hits = r.vector_search(&d.model, &d.vector, q.before, NEAREST + q.exclude.len())?;
    hits.retain(|(id, s)| !q.exclude.contains(id) && *s > 0.0);
    text::spread(r, q, cache, hits, "dense")
}
