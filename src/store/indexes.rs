//! The derived indexes as readers above the store see them ([`Indexes`]): the events go
//! through [`super::EventLog`], everything derived from them through this trait.

use super::log::EventLog;
use super::sqlite::{vectors, TextIndex};
use crate::event::{Event, Kind};
use crate::Result;

/// Reading the derived indexes of a SQLite ledger (or of a PostgreSQL ledger's cache on this
/// host): the full-text index, the events nearest an event, the vectors per embedding model,
/// the projection checkpoints. Readers above the store read them through this trait and the
/// events through [`EventLog`]; the connection underneath is the store's.
pub trait Indexes: EventLog {
    /// The full-text index, with a temporary index of the events it does not cover yet when
    /// there are at most `max_unindexed` of them (else an error that says to index).
    fn text_index(&self, max_unindexed: u64) -> Result<TextIndex<'_>>;
    /// The nearest events of `kinds` before (or after, `forward`) event `id`, at most `n`,
    /// within `window` ids.
    fn adjacent(
        &self,
        id: i64,
        kinds: &[Kind],
        n: usize,
        forward: bool,
        window: i64,
    ) -> Result<Vec<Event>>;
    /// How many events of the recalled kinds the ledger holds.
    fn recallable_count_any(&self) -> Result<u64>;
    /// The stored vector model called `name` (`None`: no vector of it yet).
    fn vector_model(&self, name: &str) -> Result<Option<vectors::Model>>;
    /// The `k` events before `before` whose vectors of model `name` are nearest `query`.
    fn vector_search(
        &self,
        name: &str,
        query: &[f32],
        before: i64,
        k: usize,
    ) -> Result<Vec<(i64, f64)>>;
    /// Every vector model: name, dimensions, vectors stored.
    fn vector_models(&self) -> Result<Vec<(String, usize, u64)>>;
    /// Recalled events after `after` with no vector of model `name`, at most `limit`.
    fn missing_vectors(&self, name: &str, after: i64, limit: usize) -> Result<Vec<(i64, String)>>;
    /// How many recalled events have no vector of model `name`.
    fn missing_vector_count(&self, name: &str) -> Result<u64>;
    /// The first `limit` stored vectors of model `name`: event id and the packed bytes.
    fn stored_vectors(&self, name: &str, limit: usize) -> Result<Vec<(i64, Vec<u8>)>>;
    /// The newest projection checkpoint `name` of `format` at or below `max_id`, read by
    /// `read` (`None` from `read`: unreadable, an older one is tried).
    fn load_checkpoint<T>(
        &self,
        name: &str,
        format: i64,
        max_id: i64,
        read: impl FnOnce(i64, &[u8]) -> Option<T>,
    ) -> Result<Option<(i64, T)>>
    where
        Self: Sized;
}
