//! An event log in memory (tantivy's `RamDirectory` beside its real directories): the
//! [`EventLog`], [`Txn`], [`Writer`] and the write session's traits ([`SessionTxn`],
//! [`SessionWriter`]) over a vector of events, with simple versions of the derived indexes a
//! turn and a tick touch. It passes the contract suite (`store/contract.rs`), so the turn's
//! stages and the tick's decisions get unit tests with no file and no database.
//!
//! Connections ([`Memory::clone`]) share one log; a write transaction holds its lock from its
//! first statement to its end (SQLite's `BEGIN IMMEDIATE`), and is undone when it is dropped
//! without committing.

use super::indexes::Indexes;
use super::log::{
    fork_error, link, verbatim_refusal, Checkpoint, Ending, EventLog, Links, SessionTxn,
    SessionWriter, Txn, Writer,
};
use super::sqlite::{vectors, TextIndex};
use super::{Filter, Head, RECALLED_KINDS};
use crate::event::{Event, Kind, NewEvent};
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Vectors per embedding model: dimensions, and event id → vector.
type Vectors = BTreeMap<String, (usize, BTreeMap<i64, Vec<f32>>)>;

/// The log and its derived parts, as every connection sees them.
#[derive(Debug, Clone, Default)]
struct State {
    /// The events, ids from 1 (the event with id `i` at index `i - 1`).
    events: Vec<Event>,
    /// Vectors per embedding model.
    vectors: Vectors,
}

/// An in-memory log. Clones are connections to the same log.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    shared: Arc<Mutex<State>>,
}

impl Memory {
    /// An empty log.
    pub fn new() -> Memory {
        Memory::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic inside a transaction undid its writes before the lock was let go.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One write transaction on a [`Memory`]: the log's lock, held to the end, and what undoes
/// the transaction unless it commits.
pub struct MemoryTxn<'a> {
    state: MutexGuard<'a, State>,
    /// The log's length when the transaction began.
    base: usize,
    /// The rows as they were before this transaction scrubbed them.
    scrubbed: Vec<Event>,
    /// The vectors as they were, once this transaction changed them.
    vectors: Option<Vectors>,
    committed: bool,
    scratch: Vec<u8>,
}

impl Drop for MemoryTxn<'_> {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let base = self.base;
        self.state.events.truncate(base);
        for row in self.scrubbed.drain(..).rev() {
            if let Some(slot) = usize::try_from(row.id - 1)
                .ok()
                .and_then(|i| self.state.events.get_mut(i))
            {
                *slot = row;
            }
        }
        if let Some(v) = self.vectors.take() {
            self.state.vectors = v;
        }
    }
}

impl State {
    fn head(&self) -> Option<Head> {
        self.events.last().map(|e| Head {
            id: e.id,
            hash: e.hash.clone(),
        })
    }

    fn get(&self, id: i64) -> Option<Event> {
        let i = usize::try_from(id.checked_sub(1)?).ok()?;
        self.events.get(i).cloned()
    }

    fn matching(&self, f: &Filter) -> Vec<Event> {
        self.events
            .iter()
            .filter(|e| {
                f.since.is_none_or(|s| e.id >= s)
                    && f.until.is_none_or(|u| e.id <= u)
                    && (f.kinds.is_empty() || f.kinds.iter().any(|k| k.as_str() == e.kind.as_str()))
            })
            .cloned()
            .collect()
    }

    fn id_of_hash(&self, hash: &str) -> Option<i64> {
        self.events
            .iter()
            .find(|e| e.hash.as_deref() == Some(hash))
            .map(|e| e.id)
    }

    fn push(&mut self, ev: Event) -> Result<()> {
        if let Some(h) = ev.hash.as_deref() {
            if let Some(id) = self.id_of_hash(h) {
                return Err(fork_error(format!(
                    "event {}: its hash {h} is event {id}'s: the log never holds one hash twice",
                    ev.id
                )));
            }
        }
        self.events.push(ev);
        Ok(())
    }

    fn adjacent(
        &self,
        id: i64,
        kinds: &[Kind],
        n: usize,
        forward: bool,
        window: i64,
    ) -> Vec<Event> {
        let near = |e: &&Event| {
            kinds.iter().any(|k| k.as_str() == e.kind.as_str())
                && if forward {
                    e.id > id && e.id <= id.saturating_add(window)
                } else {
                    e.id < id && e.id >= id.saturating_sub(window)
                }
        };
        if forward {
            self.events.iter().filter(near).take(n).cloned().collect()
        } else {
            self.events
                .iter()
                .rev()
                .filter(near)
                .take(n)
                .cloned()
                .collect()
        }
    }

    fn recallable(&self) -> impl Iterator<Item = &Event> {
        self.events
            .iter()
            .filter(|e| RECALLED_KINDS.contains(&e.kind.as_str()))
    }

    fn missing_vectors(&self, name: &str, after: i64) -> Vec<(i64, String)> {
        let have = self.vectors.get(name);
        self.recallable()
            .filter(|e| e.id > after && !have.is_some_and(|(_, v)| v.contains_key(&e.id)))
            .map(|e| (e.id, e.content.clone()))
            .collect()
    }
}

/// The readers' traits on a connection and on a transaction, each through its `state`.
macro_rules! reads {
    ($t:ty, $state:ident) => {
        impl EventLog for $t {
            fn head(&self) -> Result<Option<Head>> {
                Ok($state!(self).head())
            }
            fn get(&self, id: i64) -> Result<Option<Event>> {
                Ok($state!(self).get(id))
            }
            fn scan(
                &self,
                filter: &Filter,
                each: &mut dyn FnMut(Event) -> Result<bool>,
            ) -> Result<()> {
                // Read first, then called: `each` may read this log again.
                let found = $state!(self).matching(filter);
                for e in found {
                    if !each(e)? {
                        break;
                    }
                }
                Ok(())
            }
            fn tail(&self, filter: &Filter, n: usize) -> Result<Vec<Event>> {
                let mut found = $state!(self).matching(filter);
                Ok(found.split_off(found.len().saturating_sub(n)))
            }
            fn count_kind_after(&self, kind: Kind, after: i64) -> Result<u64> {
                let s = $state!(self);
                Ok(s.events
                    .iter()
                    .filter(|e| e.id > after && e.kind == kind)
                    .count() as u64)
            }
            fn id_of_hash(&self, hash: &str) -> Result<Option<i64>> {
                Ok($state!(self).id_of_hash(hash))
            }
        }

        impl Indexes for $t {
            fn text_index(&self, _max_unindexed: u64) -> Result<TextIndex<'_>> {
                Ok(TextIndex::empty())
            }
            fn adjacent(
                &self,
                id: i64,
                kinds: &[Kind],
                n: usize,
                forward: bool,
                window: i64,
            ) -> Result<Vec<Event>> {
                Ok($state!(self).adjacent(id, kinds, n, forward, window))
            }
            fn recallable_count_any(&self) -> Result<u64> {
                Ok($state!(self).recallable().count() as u64)
            }
            fn vector_model(&self, name: &str) -> Result<Option<vectors::Model>> {
                let s = $state!(self);
                let mid = s.vectors.keys().position(|k| k == name);
                Ok(mid.map(|mid| vectors::Model {
                    mid: mid as i64,
                    dim: s.vectors[name].0,
                }))
            }
            fn vector_search(
                &self,
                _name: &str,
                _query: &[f32],
                _before: i64,
                _k: usize,
            ) -> Result<Vec<(i64, f64)>> {
                Ok(Vec::new())
            }
            fn vector_models(&self) -> Result<Vec<(String, usize, u64)>> {
                let s = $state!(self);
                Ok(s.vectors
                    .iter()
                    .map(|(name, (dim, v))| (name.clone(), *dim, v.len() as u64))
                    .collect())
            }
            fn missing_vectors(
                &self,
                name: &str,
                after: i64,
                limit: usize,
            ) -> Result<Vec<(i64, String)>> {
                let mut found = $state!(self).missing_vectors(name, after);
                found.truncate(limit);
                Ok(found)
            }
            fn missing_vector_count(&self, name: &str) -> Result<u64> {
                Ok($state!(self).missing_vectors(name, 0).len() as u64)
            }
            fn stored_vectors(&self, _name: &str, _limit: usize) -> Result<Vec<(i64, Vec<u8>)>> {
                Ok(Vec::new())
            }
            fn load_checkpoint<T>(
                &self,
                _name: &str,
                _format: i64,
                _max_id: i64,
                _read: impl FnOnce(i64, &[u8]) -> Option<T>,
            ) -> Result<Option<(i64, T)>> {
                Ok(None)
            }
        }
    };
}

macro_rules! locked {
    ($s:expr) => {
        $s.state()
    };
}
macro_rules! held {
    ($s:expr) => {
        (&*$s.state)
    };
}
reads!(Memory, locked);
reads!(MemoryTxn<'_>, held);

impl Txn for MemoryTxn<'_> {
    fn append_linked(&mut self, ev: &NewEvent, ts: &str) -> Result<Event> {
        let head = self.state.head();
        let event = link(
            head.as_ref(),
            &ev.kind,
            &ev.content,
            &ev.meta,
            ts,
            &mut self.scratch,
        )?;
        self.state.push(event.clone())?;
        Ok(event)
    }

    fn insert_verbatim(&mut self, ev: &Event, links: Links) -> Result<()> {
        if let Some(why) = verbatim_refusal(self.state.head().as_ref(), ev, links) {
            return Err(fork_error(why));
        }
        self.state.push(ev.clone())
    }
}

impl Writer for Memory {
    fn transact<T>(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<T>) -> Result<T> {
        self.session(&mut |tx| f(tx))
    }
}

impl SessionTxn for MemoryTxn<'_> {
    fn put_vectors(&mut self, name: &str, dim: usize, v: &[(i64, Vec<f32>)]) -> Result<usize> {
        if let Some((id, odd)) = v.iter().find(|(_, x)| x.len() != dim) {
            return Err(Error::bad_input(
                None,
                format!(
                    "event {id}'s vector has {} dimensions, not {dim}",
                    odd.len()
                ),
            ));
        }
        if self.vectors.is_none() {
            self.vectors = Some(self.state.vectors.clone());
        }
        let (have, stored) = self
            .state
            .vectors
            .entry(name.to_string())
            .or_insert_with(|| (dim, BTreeMap::new()));
        if *have != dim {
            return Err(Error::bad_input(
                None,
                format!("embedding model {name} gives {dim} dimensions, but its stored vectors have {have}"),
            ));
        }
        let before = stored.len();
        for (id, x) in v {
            stored.insert(*id, x.clone());
        }
        Ok(stored.len() - before)
    }

    fn retention_candidates(
        &self,
        before: i64,
        kind: Option<&str>,
        source: Option<&str>,
        cutoff: &str,
        limit: usize,
    ) -> Result<Vec<i64>> {
        let by = |e: &Event| {
            let m = e.meta_map().ok();
            m.and_then(|m| m.get("source")?.as_str().map(str::to_string))
        };
        Ok(self
            .state
            .events
            .iter()
            .filter(|e| {
                e.id < before
                    && e.ts.as_str() < cutoff
                    && !matches!(e.kind, Kind::Erasure | Kind::Config)
                    && kind.is_none_or(|k| e.kind.as_str() == k)
                    && source.is_none_or(|s| by(e).as_deref() == Some(s))
                    && !e.is_blank()
                    && e.hash.as_deref().is_some_and(|h| !h.is_empty())
            })
            .take(limit)
            .map(|e| e.id)
            .collect())
    }

    fn quoting(&self, id: i64, content: &str) -> Result<Vec<i64>> {
        let needles = super::quote_needles(content);
        let of = |e: &Event| {
            serde_json::from_str::<serde_json::Value>(&e.content)
                .ok()
                .and_then(|v| v.get("event_id")?.as_i64())
        };
        Ok(self
            .state
            .events
            .iter()
            .filter(|e| e.id > id)
            .filter(|e| {
                if e.kind == Kind::EmbeddingAdd {
                    return of(e) == Some(id);
                }
                let Some((raw, json)) = &needles else {
                    return false;
                };
                super::QUOTING_KINDS.contains(&e.kind)
                    && (e.content.contains(raw.as_str())
                        || e.content.contains(json.as_str())
                        || e.meta.contains(json.as_str()))
            })
            .map(|e| e.id)
            .collect())
    }

    fn erased_by(&self, id: i64) -> Result<Option<i64>> {
        let needle = format!("\"erased_id\":{id},");
        Ok(self
            .state
            .events
            .iter()
            .find(|e| e.kind == Kind::Erasure && e.meta.contains(&needle))
            .map(|e| e.id))
    }

    fn scrub(&mut self, target: &Event) -> Result<()> {
        let Some(row) = usize::try_from(target.id - 1)
            .ok()
            .and_then(|i| self.state.events.get_mut(i))
        else {
            return Ok(());
        };
        let was = row.clone();
        row.content.clear();
        row.meta = "{}".into();
        self.scrubbed.push(was);
        if self.vectors.is_none() {
            self.vectors = Some(self.state.vectors.clone());
        }
        for (_, v) in self.state.vectors.values_mut() {
            v.remove(&target.id);
        }
        Ok(())
    }

    fn compact_after_erasure(&mut self) -> Result<()> {
        Ok(())
    }

    fn checkpoint(
        &self,
        _name: &str,
        _format: i64,
        _max_id: i64,
        _read: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<i64>> {
        Ok(None)
    }
}

impl SessionWriter for Memory {
    fn session_ending<T>(
        &mut self,
        f: &mut dyn FnMut(&mut dyn SessionTxn) -> Result<Ending<T>>,
    ) -> Result<T> {
        let state = self.state();
        let mut tx = MemoryTxn {
            base: state.events.len(),
            state,
            scrubbed: Vec::new(),
            vectors: None,
            committed: false,
            scratch: Vec::new(),
        };
        match f(&mut tx)? {
            Ending::Commit(out) => {
                tx.committed = true;
                Ok(out)
            }
            // Dropped uncommitted: undone.
            Ending::RollBack(out) => Ok(out),
        }
    }

    fn forget_erased_bytes(&mut self) -> Result<bool> {
        Ok(true)
    }

    fn keep_checkpoint(&mut self, _c: &Checkpoint) {}
}
