//! Warnings the store has for the user about something that worked, but not wholly: a
//! cached PostgreSQL ledger whose server committed an append that this host's cache could not
//! (its disk full), a head this host could not write down. The store never prints (stdio is
//! the programs' own): it queues them here, and the programs' runner prints each one as
//! `pmm-<tool>: warning: …` when the program ends ([`take`]).

use std::sync::Mutex;

/// At most this many are kept (the oldest first): a long-running program that keeps failing
/// to write its cache must not grow without bound.
const KEPT: usize = 64;

static QUEUED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Queues a warning for the user (one repeated is kept once).
pub(crate) fn push(warning: String) {
    let mut q = QUEUED.lock().unwrap_or_else(|p| p.into_inner());
    if q.contains(&warning) {
        return;
    }
    if q.len() >= KEPT {
        q.remove(0);
    }
    q.push(warning);
}

/// The warnings queued so far, oldest first; the queue is left empty.
pub fn take() -> Vec<String> {
    std::mem::take(&mut *QUEUED.lock().unwrap_or_else(|p| p.into_inner()))
}
