//! `pmm-verify --deep` on a ledger file: every turn of the current prompt format has its prompt
//! rebuilt from the ledger ([`crate::context::prompt`]) and checked against the reply's
//! `prompt_sha256`. One fold over the ledger gives the state as of each turn (from the newest
//! projection checkpoint before the first one), replies are read a page at a time (memory stays
//! flat); the history and the recorded selection are index look-ups. Replies of another format, or of none, are counted, not checked.

use crate::chain::Problem;
use crate::context::prompt::{self, RebuildError, Turn};
use crate::event::{Event, Kind};
use crate::projection::state::Projections;
use crate::store::{Cached, Filter, Reads};
use serde::Serialize;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What the prompt check did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PromptCounts {
    /// Prompts rebuilt and compared.
    pub checked: u64,
    /// Replies of another (older) prompt format, or of none: not checked.
    pub other_format: u64,
    /// Prompts whose digest differs, or that could not be rebuilt.
    pub mismatches: u64,
    /// Prompts that differ and were built after an erased event (their inputs may have held
    /// its text): not reported, counted here. Left out when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub skipped_for_erasure: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How many replies are read ahead at a time: memory holds one page, whatever the ledger.
const PAGE: usize = 4096;

/// How many differing turns the checking thread may have found and not yet handed over.
const QUEUED: usize = 1024;

/// SQLite's page cache for the checking thread's connection, in KiB.
const PAGE_CACHE_KIB: u32 = 16 << 10;

/// The prompt check of a ledger file running on its own thread, with its own read connection
/// and snapshot, beside the chain walk ([`spawn`]); [`Running::finish`] collects it.
pub struct Running<'scope> {
    found: std::sync::mpsc::Receiver<(i64, Problem)>,
    thread: Option<std::thread::ScopedJoinHandle<'scope, crate::Result<PromptCounts>>>,
    stop: Arc<AtomicBool>,
}

/// A check given up (the walk failed): the thread stops at its next turn.
impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts checking every current-format turn of the ledger at `path` on a thread of `scope`.
/// Differing turns wait in a bounded queue (memory stays flat: the thread waits when it is
/// full); dropping the [`Running`] stops the thread at the next one it finds.
pub fn spawn<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    path: std::path::PathBuf,
) -> Running<'scope> {
    let (tx, found) = std::sync::mpsc::sync_channel(QUEUED);
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let thread = scope.spawn(move || {
        let ledger = crate::store::Ledger::open_reader(&path)?;
        ledger.set_page_cache(PAGE_CACHE_KIB)?;
        ledger.in_snapshot(|l| {
            let cached = Cached::new(l);
            check_paged(&cached, PAGE, &stopped, &mut |id, problem| {
                tx.send((id, problem)).is_ok()
            })
        })
    });
    Running {
        found,
        thread: Some(thread),
        stop,
    }
}

impl Running<'_> {
    /// Waits for the check and hands each differing turn to `report` with the reply's id. A
    /// turn that differs and comes after `first_erased` (the first event a verified erasure
    /// names) is counted as skipped instead: its prompt may have shown the erased text.
    pub fn finish(
        mut self,
        first_erased: Option<i64>,
        report: &mut dyn FnMut(i64, Problem),
    ) -> crate::Result<PromptCounts> {
        let (mut mismatches, mut skipped) = (0, 0);
        for (id, problem) in self.found.iter() {
            if first_erased.is_some_and(|e| e < id) {
                skipped += 1;
            } else {
                mismatches += 1;
                report(id, problem);
            }
        }
        let ended =
            |_| crate::Error::bad_input(None, "the prompt check's thread ended unexpectedly");
        let thread = self.thread.take().ok_or_else(|| ended(()))?;
        let counts = thread.join().map_err(|_| ended(()))??;
        Ok(PromptCounts {
            mismatches,
            skipped_for_erasure: skipped,
            ..counts
        })
    }
}

/// Checks every current-format turn of `r`, handing each turn whose prompt differs (or cannot
/// be rebuilt) to `report` with the reply's id; `report` returns false to stop. The counts say
/// how many were checked and how many were of another format (`mismatches` counts those
/// reported). Replies are read a page at a time; the projections move forward through the
/// ledger once, to each turn's head in order. A turn whose head the fold has already passed
/// (two turns that interleaved, across a page boundary) is rebuilt from a checkpoint instead.
pub fn check<R: Reads>(
    r: &R,
    report: &mut dyn FnMut(i64, Problem) -> bool,
) -> crate::Result<PromptCounts> {
    check_paged(r, PAGE, &AtomicBool::new(false), report)
}

/// [`check`], reading `page_size` replies at a time.
/// Stops early, with the counts so far, once `stop` is set.
fn check_paged<R: Reads>(
    r: &R,
    page_size: usize,
    stop: &AtomicBool,
    report: &mut dyn FnMut(i64, Problem) -> bool,
) -> crate::Result<PromptCounts> {
    let mut counts = PromptCounts::default();
    let mut p: Option<Projections> = None;
    let mut recent = Recent::default();
    let mut next = 1;
    loop {
        let (turns, after) = page(r, next, page_size, &mut counts)?;
        let mut due: Vec<(i64, Turn)> = Vec::with_capacity(turns.len());
        for t in turns {
            due.push((prompt::head_of(r, t.user_id)?, t));
        }
        due.sort_by_key(|(head, t)| (*head, t.reply));
        for (head, t) in due {
            if stop.load(Ordering::Relaxed) {
                return Ok(counts);
            }
            let rebuilt = match p.as_mut() {
                Some(p) if p.mirror.last_event_id <= head => {
                    fold_to(r, p, head, &mut recent)?;
                    let history = recent.before(t.user_id);
                    prompt::rebuild_with_history(r, p, &t, history)?
                }
                Some(_) => prompt::rebuild(r, &t)?,
                None => {
                    let start = crate::store::project(r, Some(head), true)?.projections;
                    prompt::rebuild_with(r, p.insert(start), &t)?
                }
            };
            counts.checked += 1;
            if let Some(problem) = compare(&t, rebuilt) {
                counts.mismatches += 1;
                if !report(t.reply, problem) {
                    return Ok(counts);
                }
            }
        }
        match after {
            Some(a) => next = a + 1,
            None => return Ok(counts),
        }
    }
}

/// Up to `page_size` current-format replies from id `since` on (others are counted), and the id
/// of the last reply read when there may be more.
fn page<R: Reads>(
    r: &R,
    since: i64,
    page_size: usize,
    counts: &mut PromptCounts,
) -> crate::Result<(Vec<Turn>, Option<i64>)> {
    let filter = Filter {
        since: Some(since),
        kinds: vec![Kind::AssistantMessage.to_string()],
        ..Filter::default()
    };
    let (mut turns, mut read, mut last) = (Vec::new(), 0, None);
    r.scan(&filter, |e| {
        match prompt::turn_of_reply(&e) {
            Ok(t) => turns.push(t),
            Err(_) => counts.other_format += 1,
        }
        read += 1;
        last = Some(e.id);
        Ok(read < page_size)
    })?;
    Ok((turns, if read < page_size { None } else { last }))
}

/// Folds the events after `p`'s last one, up to `head`, into `p`; the messages among them go
/// to `recent`.
fn fold_to<R: Reads>(
    r: &R,
    p: &mut Projections,
    head: i64,
    recent: &mut Recent,
) -> crate::Result<()> {
    if p.mirror.last_event_id >= head {
        return Ok(());
    }
    let filter = Filter {
        since: Some(p.mirror.last_event_id + 1),
        until: Some(head),
        ..Filter::default()
    };
    r.scan(&filter, |e| {
        p.apply(&e);
        recent.see(e);
        Ok(true)
    })
}

/// The newest messages the fold went by (user and assistant messages, at most one more than
/// a prompt's history): a turn's history without reading the ledger again.
#[derive(Default)]
struct Recent {
    messages: std::collections::VecDeque<Event>,
}

impl Recent {
    fn see(&mut self, e: Event) {
        if matches!(e.kind, Kind::UserMessage | Kind::AssistantMessage) {
            if self.messages.len() > prompt::HISTORY_MESSAGES {
                self.messages.pop_front();
            }
            self.messages.push_back(e);
        }
    }

    /// The newest [`prompt::HISTORY_MESSAGES`] messages before `user_id`, oldest first, when
    /// the fold went by that many of them (`None`: read them from the ledger). The fold has
    /// passed the turn's head, the user message or its embedding, so at most the user message
    /// itself is newer.
    fn before(&self, user_id: i64) -> Option<Vec<Event>> {
        let older: Vec<&Event> = self.messages.iter().filter(|e| e.id < user_id).collect();
        let n = prompt::HISTORY_MESSAGES;
        (older.len() >= n).then(|| {
            older[older.len() - n..]
                .iter()
                .map(|e| (*e).clone())
                .collect()
        })
    }
}

/// The finding for a turn whose rebuilt prompt is not the one recorded.
fn compare(t: &Turn, rebuilt: Result<prompt::Prompt, RebuildError>) -> Option<Problem> {
    let (what, expected) = match rebuilt {
        Ok(p) => {
            let sha = p.sha256();
            if sha == t.recorded {
                return None;
            }
            (
                "prompt_sha256 (the prompt rebuilt from the ledger)".to_string(),
                Value::String(sha),
            )
        }
        Err(e) => (format!("prompt_sha256: {e}"), Value::Null),
    };
    Some(Problem::DerivedMismatch {
        what,
        expected,
        found: Value::String(t.recorded.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Clock;
    use crate::llm::{AdapterKind, Config};
    use crate::store::Ledger;

    /// Pages of one or two replies give what one page gives: every turn checked, none differs.
    #[test]
    fn every_page_size_checks_every_turn() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        let mut a = crate::llm::adapter(&Config::new(AdapterKind::Dummy)).unwrap();
        let opts = crate::turn::Options {
            clock: Clock::pinned("2025-11-24T05:55:41Z").unwrap(),
            ..Default::default()
        };
        for i in 0..5 {
            crate::turn::run(&mut l, a.as_mut(), &format!("message {i}"), &opts).unwrap();
        }
        for size in [1, 2, 3, PAGE] {
            let mut problems = Vec::new();
            let c = check_paged(&l, size, &AtomicBool::new(false), &mut |id, p| {
                problems.push((id, p));
                true
            })
            .unwrap();
            assert_eq!(
                (c.checked, c.mismatches, c.other_format),
                (5, 0, 0),
                "{size}"
            );
            assert!(problems.is_empty(), "{problems:?}");
        }
    }
}
