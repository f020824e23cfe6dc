//! Projections: pure folds over events in id order (SPEC §5). Identity, open goals and the
//! self-model are not stored anywhere; they are recomputed from the ledger, identically on
//! every machine.

pub mod adapt;
pub mod autonomy;
pub mod checkpoint;
pub mod concepts;
pub mod graph;
pub mod indexing;
pub mod mirror;
mod packed;
pub mod rsm;
pub mod state;
pub mod supersession;
