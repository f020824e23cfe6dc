//! Formats that writers and readers both compute, kept below both: the autonomy slot ids
//! (FORMATS.md §8.1: the kernel writes them, the autonomy projection reads them, deep
//! verification recomputes them) and how a reply's finish reason reads (the adapters write
//! it, the turn and the exports show it).

pub mod reply;
pub mod slot;
