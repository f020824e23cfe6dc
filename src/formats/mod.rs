//! Formats that writers and readers both compute, kept below both: the autonomy slot ids
//! (FORMATS.md §8.1: the kernel writes them, the autonomy projection reads them, deep
//! verification recomputes them) and how a reply's finish reason reads (the adapters write
//! it, the turn and the exports show it); and the English stop words recall and the
//! indexer's rule 2 both use ([`stop`]).

pub mod reply;
pub mod slot;
pub mod stop;
