//! `pmm-verify --deep` on a ledger file: every turn of the current prompt format has its prompt
//! rebuilt from the ledger ([`crate::context::prompt`]) and checked against the reply's
//! `prompt_sha256`, and so has every thinking tick's reply (`kernel::think::rebuild`, as
//! `pmm-replay --prompt` does, after the turns, each from a projection at its slot's
//! stimulus). One fold over the ledger gives the state as of each turn (from the newest
//! projection checkpoint before the first one), replies are read a page at a time (memory stays
//! flat); the history and the recorded selection are index look-ups. Replies of another format, or of none, are counted, not checked.
//!
//! Beside `pmm-verify --deep`'s chain walk the fold reads no event itself: the walk hands over
//! the events it read and parsed ([`Feed`]), in bounded batches, so the ledger is read once.

use crate::chain::Problem;
use crate::context::prompt::{self, RebuildError, Turn};
use crate::event::{Event, Kind};
use crate::kernel::think;
use crate::projection::state::Projections;
use crate::store::{Cached, Filter, Indexes};
use serde::Serialize;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;

/// What the prompt check did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PromptCounts {
    /// Prompts rebuilt and compared.
    pub checked: u64,
    /// Of those, thinking ticks' prompts (`kernel::think::rebuild`). Left out when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub thinking: u64,
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

/// How many events the walk hands over at a time ([`Feed`]), and how many such batches may
/// wait for the checking thread: at most `BATCH * BATCHES` events in flight.
const BATCH: usize = 128;
const BATCHES: usize = 32;

/// The bounds of a running check: the findings queue and the event stream.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    queued: usize,
    batch: usize,
    batches: usize,
}

const BOUNDS: Bounds = Bounds {
    queued: QUEUED,
    batch: BATCH,
    batches: BATCHES,
};

/// The prompt check of a ledger file running on its own thread, with its own read connection
/// and snapshot, beside the chain walk ([`spawn`]); [`Running::finish`] collects it.
pub struct Running<'scope> {
    found: Receiver<(i64, Problem)>,
    thread: Option<std::thread::ScopedJoinHandle<'scope, crate::Result<PromptCounts>>>,
    stop: Arc<AtomicBool>,
    feed: Option<Feed>,
}

/// A check given up (the walk failed): the thread stops at its next turn.
impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts checking every current-format turn of the ledger at `path` on a thread of `scope`.
/// Differing turns wait in a bounded queue (memory stays flat: the thread waits when it is
/// full); dropping the [`Running`] stops the thread at the next one it finds. The thread folds
/// the events handed to [`Running::feed`] (read from the ledger when nobody feeds it).
pub fn spawn<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    path: std::path::PathBuf,
) -> Running<'scope> {
    spawn_with(scope, path, BOUNDS)
}

/// [`spawn`], with the queue and the stream bounded by `bounds`.
fn spawn_with<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    path: std::path::PathBuf,
    bounds: Bounds,
) -> Running<'scope> {
    let (tx, found) = std::sync::mpsc::sync_channel(bounds.queued);
    let (feed, mut stream) = stream(bounds.batch, bounds.batches);
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let thread = scope.spawn(move || {
        let ledger = crate::store::Ledger::open_reader(&path)?;
        ledger.set_page_cache(PAGE_CACHE_KIB)?;
        ledger.in_snapshot(|l| {
            let cached = Cached::new(l);
            let report =
                &mut |id, problem, stream: &mut Stream| hand_over(&tx, (id, problem), stream);
            check_paged(&cached, PAGE, &stopped, &mut stream, report)
        })
    });
    Running {
        found,
        thread: Some(thread),
        stop,
        feed: Some(feed),
    }
}

/// Queues a finding for [`Running::finish`]. When the queue is full the thread must wait for
/// the walk to end, so it first stops taking the walk's events (the walk would otherwise wait
/// for it): from then on it reads them from the ledger. False when nobody collects findings.
fn hand_over(tx: &SyncSender<(i64, Problem)>, found: (i64, Problem), stream: &mut Stream) -> bool {
    match tx.try_send(found) {
        Ok(()) => true,
        Err(TrySendError::Full(found)) => {
            stream.detach();
            tx.send(found).is_ok()
        }
        Err(TrySendError::Disconnected(_)) => false,
    }
}

impl Running<'_> {
    /// The walk's end of the event stream (once): every event of the ledger, in id order, as
    /// the walk reads it. Without it, or past its end, the thread reads the ledger itself.
    pub fn feed(&mut self) -> Option<Feed> {
        self.feed.take()
    }

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
pub fn check<R: Indexes>(
    r: &R,
    report: &mut dyn FnMut(i64, Problem) -> bool,
) -> crate::Result<PromptCounts> {
    let stop = AtomicBool::new(false);
    check_paged(
        r,
        PAGE,
        &stop,
        &mut Stream::none(),
        &mut |id, problem, _| report(id, problem),
    )
}

/// What [`check_paged`] hands each differing turn to: the reply's id, the finding, and the
/// stream the fold takes its events from (to detach it before waiting). False stops the check.
type Report<'a> = &'a mut dyn FnMut(i64, Problem, &mut Stream) -> bool;

/// [`check`], reading `page_size` replies at a time, and folding the events of `stream` as far
/// as it goes (the ledger's after that). Stops early, with the counts so far, once `stop` is
/// set.
fn check_paged<R: Indexes>(
    r: &R,
    page_size: usize,
    stop: &AtomicBool,
    stream: &mut Stream,
    report: Report<'_>,
) -> crate::Result<PromptCounts> {
    let mut counts = PromptCounts::default();
    let mut p: Option<Projections> = None;
    let mut recent = Recent::default();
    let mut next = 1;
    let mut thinking = Vec::new();
    loop {
        let (mut due, after) = page(r, next, page_size, &mut counts, &mut thinking)?;
        // In the order of their heads: a head is the user message or the event after it, so
        // the user messages' order is the heads' order.
        due.sort_by_key(|t| (t.user_id, t.reply));
        for t in due {
            if stop.load(Ordering::Relaxed) {
                return Ok(counts);
            }
            let rebuilt = match p.as_mut() {
                Some(p) if p.mirror.last_event_id <= t.user_id => {
                    fold_to(r, p, t.user_id, &mut recent, stream)?;
                    let head = head_in(r, stream, t.user_id)?;
                    fold_to(r, p, head, &mut recent, stream)?;
                    let history = recent.before(t.user_id);
                    let until = t.reply.saturating_add(prompt::SELECTION_REACH);
                    let nearby = stream.window(t.reply, until);
                    prompt::rebuild_with_history(r, p, &t, history, nearby.as_deref())?
                }
                Some(_) => prompt::rebuild(r, &t)?,
                None => {
                    let head = prompt::head_of(r, t.user_id)?;
                    let start =
                        crate::projection::checkpoint::project(r, Some(head), true)?.projections;
                    prompt::rebuild_with(r, p.insert(start), &t)?
                }
            };
            counts.checked += 1;
            if let Some(problem) = compare(&t, rebuilt) {
                counts.mismatches += 1;
                if !report(t.reply, problem, stream) {
                    return Ok(counts);
                }
            }
        }
        match after {
            Some(a) => next = a + 1,
            None => break,
        }
    }
    check_thinking(r, &thinking, stop, &mut counts, stream, report)?;
    Ok(counts)
}

/// Whether `e` may be a thinking tick's reply (its format says so; [`think::rebuild`] decides).
fn is_thinking(e: &Event) -> bool {
    think::THINK_FORMATS.iter().any(|f| e.meta.contains(f))
        && e.meta.contains(think::SOURCE.as_str())
}

/// Rebuilds the prompt of each thinking reply in `ids` ([`think::rebuild`]) and compares its
/// digest with the recorded `prompt_sha256`.
fn check_thinking<R: Indexes>(
    r: &R,
    ids: &[i64],
    stop: &AtomicBool,
    counts: &mut PromptCounts,
    stream: &mut Stream,
    report: Report<'_>,
) -> crate::Result<()> {
    for &id in ids {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let Some(e) = r.get(id)? else { continue };
        let Some((rebuilt, recorded)) = think::rebuild(r, &e)? else {
            counts.other_format += 1;
            continue;
        };
        counts.checked += 1;
        counts.thinking += 1;
        let sha = rebuilt.sha256();
        if sha == recorded {
            continue;
        }
        counts.mismatches += 1;
        let problem = Problem::DerivedMismatch {
            what: "prompt_sha256 (the thinking tick's prompt rebuilt from the ledger)".into(),
            expected: Value::String(sha),
            found: Value::String(recorded),
        };
        if !report(id, problem, stream) {
            return Ok(());
        }
    }
    Ok(())
}

/// A turn's head ([`prompt::head_of`]) once the fold has reached its user message: from the
/// event after it in the stream when the stream holds it (the reads by id of that event were
/// a tenth of the check's reads), else read from the ledger.
fn head_in<R: Indexes>(r: &R, stream: &mut Stream, user_id: i64) -> crate::Result<i64> {
    match stream.window(user_id, user_id + 1) {
        Some(w) if w.first().is_some_and(|e| e.id == user_id + 1) => {
            Ok(prompt::head_given(user_id, w.first().copied()))
        }
        _ => prompt::head_of(r, user_id),
    }
}

/// Up to `page_size` current-format replies from id `since` on (thinking replies go to
/// `thinking`, others are counted), and the id of the last reply read when there may be more.
fn page<R: Indexes>(
    r: &R,
    since: i64,
    page_size: usize,
    counts: &mut PromptCounts,
    thinking: &mut Vec<i64>,
) -> crate::Result<(Vec<Turn>, Option<i64>)> {
    let filter = Filter {
        since: Some(since),
        kinds: vec![Kind::AssistantMessage],
        ..Filter::default()
    };
    let (mut turns, mut read, mut last) = (Vec::new(), 0, None);
    r.scan(&filter, &mut |e| {
        match prompt::turn_of_reply(&e) {
            Ok(t) => turns.push(t),
            Err(_) if is_thinking(&e) => thinking.push(e.id),
            Err(_) => counts.other_format += 1,
        }
        read += 1;
        last = Some(e.id);
        Ok(read < page_size)
    })?;
    Ok((turns, if read < page_size { None } else { last }))
}

/// Folds the events after `p`'s last one, up to `head`, into `p`, from `stream` while it has
/// them and from the ledger after that; the messages among them go to `recent`.
fn fold_to<R: Indexes>(
    r: &R,
    p: &mut Projections,
    head: i64,
    recent: &mut Recent,
    stream: &mut Stream,
) -> crate::Result<()> {
    while p.mirror.last_event_id < head {
        let Some(e) = stream.next_within(p.mirror.last_event_id, head) else {
            break;
        };
        fold(p, &e);
        if matches!(e.kind, Kind::UserMessage | Kind::AssistantMessage) {
            // What turns recall most, and read by id if not kept.
            let e = Arc::new(e);
            r.remember(Arc::clone(&e));
            recent.see(e);
        }
    }
    if p.mirror.last_event_id >= head {
        return Ok(());
    }
    let filter = Filter {
        since: Some(p.mirror.last_event_id + 1),
        until: Some(head),
        ..Filter::default()
    };
    r.scan(&filter, &mut |e| {
        fold(p, &e);
        if matches!(e.kind, Kind::UserMessage | Kind::AssistantMessage) {
            recent.see(Arc::new(e));
        }
        Ok(true)
    })
}

/// Folds `e` into the projections a prompt reads: the mirror, the self-model, the concept
/// graph, the event graph and the corrections. The autonomy and adaptive logs, which no prompt reads (the
/// `context` module does not use them), are left as they were: a rebuilt prompt differs
/// from the recorded one if that ever changes.
fn fold(p: &mut Projections, e: &Event) {
    p.mirror.apply(e);
    p.rsm.apply(e);
    p.concepts.apply(e);
    p.graph.apply(e);
    p.supersession.fold(&crate::event::Seen::new(e));
}

/// A bounded stream of events from the walk to the checking thread: the walk's [`Feed`] and
/// the thread's [`Stream`], at most `batches` batches of `batch` events in flight.
fn stream(batch: usize, batches: usize) -> (Feed, Stream) {
    let (tx, rx) = std::sync::mpsc::sync_channel(batches);
    let feed = Feed {
        tx: Some(tx),
        batch: Vec::with_capacity(batch),
        size: batch,
    };
    (feed, Stream::from(rx))
}

/// The walk's end of the event stream ([`Running::feed`]): the walk pushes every event it read,
/// in id order, and [`Feed::end`]s it. A push waits while the checking thread is a full stream
/// behind; once that thread no longer takes events, pushes are dropped.
pub struct Feed {
    tx: Option<SyncSender<Vec<Event>>>,
    batch: Vec<Event>,
    size: usize,
}

impl Feed {
    /// Hands `e` over (in a batch).
    pub fn push(&mut self, e: Event) {
        if self.tx.is_none() {
            return;
        }
        self.batch.push(e);
        if self.batch.len() >= self.size {
            self.flush();
        }
    }

    /// Hands over what is left: the walk read every event.
    pub fn end(mut self) {
        self.flush();
    }

    fn flush(&mut self) {
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(self.size));
        if let Some(tx) = &self.tx {
            if tx.send(batch).is_err() {
                self.tx = None;
            }
        }
    }
}

/// The checking thread's end of the event stream: events in id order, as far as the walk has
/// read them; nothing once the walk ended or the stream was detached.
pub struct Stream {
    rx: Option<Receiver<Vec<Event>>>,
    batch: std::vec::IntoIter<Event>,
    /// Events taken from the walk and not yet folded, in id order: the one after the fold's
    /// head, or the events up to a reply's selection ([`Stream::window`]).
    ahead: std::collections::VecDeque<Event>,
    /// The highest id the fold took or passed over.
    taken: i64,
}

/// The most events [`Stream::window`] holds ahead of the fold (the events between a turn's
/// head and its selection are a handful; other writers' events in between may be more).
const AHEAD: usize = 4096;

impl From<Receiver<Vec<Event>>> for Stream {
    fn from(rx: Receiver<Vec<Event>>) -> Self {
        Stream {
            rx: Some(rx),
            ..Stream::none()
        }
    }
}

impl Stream {
    /// A stream with no events (the fold reads the ledger).
    fn none() -> Stream {
        Stream {
            rx: None,
            batch: Vec::new().into_iter(),
            ahead: std::collections::VecDeque::new(),
            taken: i64::MIN,
        }
    }

    /// Takes no more events (the walk's pushes are dropped from now on).
    fn detach(&mut self) {
        *self = Stream::none();
    }

    /// The next event after id `after`, if it is at most `until` (a later one is kept for
    /// the next call); `None` too when the stream has ended.
    fn next_within(&mut self, after: i64, until: i64) -> Option<Event> {
        loop {
            let e = match self.ahead.pop_front() {
                Some(e) => e,
                None => self.take()?,
            };
            if e.id > until {
                self.ahead.push_front(e);
                return None;
            }
            self.taken = self.taken.max(e.id);
            if e.id > after {
                return Some(e);
            }
        }
    }

    /// Every event with an id in `(after, until]`, in id order, when the stream holds them
    /// all: none of them taken by the fold, and the walk has read past `until` (within
    /// [`AHEAD`] events). `None` otherwise (read them from the ledger).
    fn window(&mut self, after: i64, until: i64) -> Option<Vec<&Event>> {
        if after < self.taken {
            return None;
        }
        while self.ahead.back().is_none_or(|e| e.id < until) {
            if self.ahead.len() >= AHEAD {
                return None;
            }
            let e = self.take()?;
            self.ahead.push_back(e);
        }
        let within = |e: &&Event| e.id > after && e.id <= until;
        Some(self.ahead.iter().filter(within).collect())
    }

    /// The next event the walk handed over, waiting for it.
    fn take(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.batch.next() {
                return Some(e);
            }
            match self.rx.as_ref()?.recv() {
                Ok(batch) => self.batch = batch.into_iter(),
                Err(_) => self.rx = None,
            }
        }
    }
}

/// The newest messages the fold went by (user and assistant messages, at most one more than
/// a prompt's history): a turn's history without reading the ledger again.
#[derive(Default)]
struct Recent {
    messages: std::collections::VecDeque<Arc<Event>>,
}

impl Recent {
    fn see(&mut self, e: Arc<Event>) {
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
        let older: Vec<&Arc<Event>> = self.messages.iter().filter(|e| e.id < user_id).collect();
        let n = prompt::HISTORY_MESSAGES;
        (older.len() >= n).then(|| {
            older[older.len() - n..]
                .iter()
                .map(|e| Event::clone(e))
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
    use crate::store::{EventLog, Ledger};

    /// A ledger of `n` turns through the dummy model (a tick after the third).
    fn turns(dir: &std::path::Path, n: usize) -> Ledger {
        let mut l = Ledger::open_writer(&dir.join("l.db"), 1000).unwrap();
        let mut a = crate::llm::adapter(&Config::new(AdapterKind::Dummy)).unwrap();
        let opts = crate::turn::Options {
            clock: Clock::pinned("2025-11-24T05:55:41Z").unwrap(),
            ..Default::default()
        };
        for i in 0..n {
            crate::turn::run(&mut l, a.as_mut(), &format!("message {i}"), &opts).unwrap();
        }
        l
    }

    /// Every event of `l`, in id order.
    fn events(l: &Ledger) -> Vec<Event> {
        let mut all = Vec::new();
        l.scan(&Filter::default(), &mut |e| {
            all.push(e);
            Ok(true)
        })
        .unwrap();
        all
    }

    /// The check of `l` with the fold fed `fed` in batches of `batch` (the walk's events), as
    /// (counts, ids of the differing turns).
    fn check_fed(l: &Ledger, fed: Vec<Event>, batch: usize) -> (PromptCounts, Vec<i64>) {
        let (mut feed, mut stream) = stream(batch, fed.len() + 1);
        fed.into_iter().for_each(|e| feed.push(e));
        feed.end();
        let mut ids = Vec::new();
        let stop = AtomicBool::new(false);
        let c = check_paged(l, 2, &stop, &mut stream, &mut |id, _, _| {
            ids.push(id);
            true
        })
        .unwrap();
        (c, ids)
    }

    /// Pages of one or two replies give what one page gives: every turn checked, none differs.
    #[test]
    fn every_page_size_checks_every_turn() {
        let dir = tempfile::tempdir().unwrap();
        let l = turns(dir.path(), 5);
        let stop = AtomicBool::new(false);
        for size in [1, 2, 3, PAGE] {
            let mut problems = Vec::new();
            let c = check_paged(&l, size, &stop, &mut Stream::none(), &mut |id, p, _| {
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

    /// The fold takes the events it is fed (the walk's) instead of reading them, whole or in
    /// part, in batches of any size: fed the ledger's own, every turn matches; fed a user
    /// message reworded, the turns whose history it took from the fold differ.
    #[test]
    fn the_fold_takes_the_events_it_is_fed() {
        let dir = tempfile::tempdir().unwrap();
        let l = turns(dir.path(), 6);
        let all = events(&l);
        for batch in [1, 3, 1000] {
            for n in [0, 7, all.len()] {
                let (c, ids) = check_fed(&l, all[..n].to_vec(), batch);
                assert_eq!((c.checked, c.mismatches), (6, 0), "{batch} {n}");
                assert!(ids.is_empty(), "{ids:?}");
            }
            // The third user message: the fold starts at the first turn's head and has gone
            // by enough messages for a history from the fifth turn on.
            let mut edited = all.clone();
            let mut users = edited.iter_mut().filter(|e| e.kind == Kind::UserMessage);
            users.nth(2).unwrap().content = "something else".into();
            let (c, ids) = check_fed(&l, edited, batch);
            assert_eq!((c.checked, c.mismatches), (6, 2), "{batch}: {ids:?}");
        }
    }

    /// A turn's selection record is looked for among the events fed when they reach far
    /// enough past the reply, in the ledger otherwise: fed a record that names another turn,
    /// that turn differs; fed too few events to hold it, the ledger's record is read.
    #[test]
    fn the_selection_is_taken_from_the_events_fed_when_they_reach_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let l = turns(dir.path(), 14);
        let all = events(&l);
        let reply = all
            .iter()
            .filter(|e| e.kind == Kind::AssistantMessage)
            .nth(2)
            .unwrap()
            .id;
        let pos = all
            .iter()
            .position(|e| {
                e.kind == Kind::RetrievalSelection
                    && e.content.contains(&format!("\"turn_id\":{reply}"))
            })
            .unwrap();
        assert!(all.last().unwrap().id > reply + prompt::SELECTION_REACH);
        let mut edited = all.clone();
        edited[pos].content = edited[pos]
            .content
            .replace(&format!("\"turn_id\":{reply}"), "\"turn_id\":0");
        for batch in [1, 1000] {
            let (c, ids) = check_fed(&l, edited.clone(), batch);
            assert_eq!((c.checked, c.mismatches), (14, 1), "{batch}");
            assert_eq!(ids, [reply]);
            let (c, ids) = check_fed(&l, edited[..pos].to_vec(), batch);
            assert_eq!((c.checked, c.mismatches), (14, 0), "{batch}: {ids:?}");
        }
    }

    /// More differing turns than the findings queue holds, while the walk feeds a stream of
    /// one event: the checking thread stops taking events rather than wait for the walk that
    /// waits for it, and every finding arrives, in order.
    #[test]
    fn a_full_queue_does_not_stall_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let mut l = Ledger::open_writer(&path, 1000).unwrap();
        let clock = Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        let mut replies = Vec::new();
        for i in 0..20 {
            let user = crate::event::NewEvent::new(Kind::UserMessage, "hi", Default::default());
            let user = crate::session::append(&mut l, &user.unwrap(), &clock).unwrap();
            let meta = serde_json::json!({"prompt_format": prompt::PROMPT_FORMAT,
                "reply_to": user.id, "prompt_sha256": format!("{i:064}")});
            let Value::Object(meta) = meta else { panic!() };
            let reply = crate::event::NewEvent::new(Kind::AssistantMessage, "hello", meta);
            replies.push(
                crate::session::append(&mut l, &reply.unwrap(), &clock)
                    .unwrap()
                    .id,
            );
        }
        let all = events(&l);
        let bounds = Bounds {
            queued: 1,
            batch: 1,
            batches: 1,
        };
        let (counts, ids) = std::thread::scope(|scope| {
            let mut running = spawn_with(scope, path.clone(), bounds);
            let mut feed = running.feed().unwrap();
            all.into_iter().for_each(|e| feed.push(e));
            feed.end();
            let mut ids = Vec::new();
            let counts = running.finish(None, &mut |id, _| ids.push(id)).unwrap();
            (counts, ids)
        });
        assert_eq!((counts.checked, counts.mismatches), (20, 20));
        assert_eq!(ids, replies);
    }
}
