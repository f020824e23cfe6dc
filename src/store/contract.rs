//! The contract every event-log backend keeps ([`super::log`]): one suite of cases, each a
//! function of an empty log, run against every backend by [`contract_suite!`] (tantivy's
//! `directory/tests.rs` is the model). SQLite and the in-memory log run it here; a PostgreSQL
//! ledger as programs write it, the host cache `replica::Cached`, in `store/replica/tests.rs`,
//! on a throwaway server.

use super::log::{link, EventLog, Links, Txn, Writer};
use super::sqlite::Ledger;
use super::{Filter, Head};
use crate::chain::event_digest;
use crate::event::{Clock, Event, Kind, NewEvent};
use crate::Result;
use serde_json::{json, Value};
use std::sync::mpsc;
use std::time::Duration;

/// One empty log of a backend, and how to open connections to it.
pub(crate) trait Fresh: Sync {
    /// A connection that reads and writes.
    type Conn: Writer;
    /// Opens another connection to this log.
    fn connect(&self) -> Self::Conn;
}

/// The timestamp the cases append with (`ts` is not hashed; it is kept as given).
pub(crate) const TS: &str = "2025-11-24T05:55:41.123456Z";

/// Runs every case of the contract as its own test; `$fresh` is an expression giving
/// `Option<impl Fresh>` (`None`: the backend is not available here, the case is skipped).
macro_rules! contract_suite {
    ($fresh:expr) => {
        contract_suite!(@cases $fresh;
            append_links_to_the_head,
            ids_are_gap_free_from_one,
            hashes_are_what_pmm_append_writes,
            concurrent_writers_never_fork,
            a_waiting_writer_links_to_the_new_head,
            insert_verbatim_keeps_ids_ts_and_hashes,
            insert_verbatim_refuses_a_fork_unless_told,
            a_repeated_hash_is_an_error_never_a_state,
            a_failed_transaction_leaves_nothing,
            get_scan_and_tail_agree,
            reads_by_kind_agree_with_a_scan,
            independent_appends_are_what_pmm_append_writes,
            independent_and_transacted_appends_at_once_never_fork,
            an_independent_append_links_to_the_new_head,
        );
    };
    (@cases $fresh:expr; $($case:ident,)*) => {
        $(
            #[test]
            fn $case() {
                if let Some(log) = $fresh {
                    $crate::store::contract::$case(log);
                }
            }
        )*
    };
}
pub(crate) use contract_suite;

fn event(kind: Kind, content: &str, meta: Value) -> NewEvent {
    let Value::Object(m) = meta else {
        panic!("meta is an object")
    };
    NewEvent::new(kind, content, m).unwrap()
}

fn numbered(i: usize) -> NewEvent {
    let kind = match i % 3 {
        0 => Kind::UserMessage,
        1 => Kind::AssistantMessage,
        _ => Kind::TestEvent,
    };
    event(
        kind,
        &format!("event {i}"),
        json!({"i": i, "source": "contract"}),
    )
}

fn all<L: EventLog + ?Sized>(log: &L) -> Vec<Event> {
    let mut out = Vec::new();
    log.scan(&Filter::default(), &mut |e| {
        out.push(e);
        Ok(true)
    })
    .unwrap();
    out
}

/// Every link and id of `events` follows from the one before, and every hash is the chain's
/// hash of its fields.
fn assert_chained(events: &[Event]) {
    let mut scratch = Vec::new();
    let mut prev: Option<&Event> = None;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.id, i as i64 + 1, "ids rise by one from 1");
        assert_eq!(
            e.prev_hash,
            prev.and_then(|p| p.hash.clone()),
            "event {} links to the one before",
            e.id
        );
        let meta = e.meta_map().unwrap();
        let want = event_digest(
            &mut scratch,
            e.kind.as_str(),
            &e.content,
            &meta,
            e.prev_hash.as_deref(),
        )
        .unwrap();
        assert_eq!(
            e.hash.as_deref(),
            Some(want.to_string().as_str()),
            "event {}",
            e.id
        );
        prev = Some(e);
    }
}

/// Each append links to the head as it was, and becomes the head.
pub(crate) fn append_links_to_the_head(log: impl Fresh) {
    let mut c = log.connect();
    assert_eq!(c.head().unwrap(), None, "an empty log has no head");
    let mut last: Option<Event> = None;
    for i in 0..5 {
        let e = c.append_one(&numbered(i), TS).unwrap();
        assert_eq!(e.prev_hash, last.as_ref().and_then(|l| l.hash.clone()));
        assert_eq!(
            c.head().unwrap(),
            Some(Head {
                id: e.id,
                hash: e.hash.clone()
            })
        );
        assert_eq!(
            c.get(e.id).unwrap().as_ref(),
            Some(&e),
            "what is read is what was written"
        );
        last = Some(e);
    }
    // Several appends in one transaction link to each other, the transaction seeing its own.
    c.transact(&mut |tx| {
        for i in 5..8 {
            let e = tx.append_linked(&numbered(i), TS)?;
            assert_eq!(tx.head()?.map(|h| h.id), Some(e.id));
        }
        Ok(())
    })
    .unwrap();
    assert_chained(&all(&c));
    // Another connection sees the same log.
    assert_eq!(all(&log.connect()), all(&c));
}

/// Ids run from 1 without a gap, whatever the transactions' sizes.
pub(crate) fn ids_are_gap_free_from_one(log: impl Fresh) {
    let mut c = log.connect();
    let mut n = 0;
    for size in [1, 4, 1, 7, 2] {
        c.transact(&mut |tx| {
            for _ in 0..size {
                tx.append_linked(&numbered(n), TS)?;
                n += 1;
            }
            Ok(())
        })
        .unwrap();
    }
    let ids: Vec<i64> = all(&c).iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=n as i64).collect::<Vec<_>>());
}

/// The events a backend writes are byte for byte what `pmm-append` writes for the same input
/// (the SQLite store's insert, under the write session of the programs): the same canonical meta
/// text, links and hashes.
pub(crate) fn hashes_are_what_pmm_append_writes(log: impl Fresh) {
    let inputs = [
        event(Kind::UserMessage, "hello", json!({})),
        event(
            Kind::AssistantMessage,
            "ünïcødé — \"quoted\" \\ and\nnew lines\u{0}and a NUL",
            json!({"source": "contract", "z": [1, 2.5, "x"], "a": {"nested": null, "é": true}}),
        ),
        event(
            Kind::TestEvent,
            "",
            json!({"big": 12345678901234567890u64, "f": 0.1}),
        ),
        event(
            Kind::UserMessage,
            "emoji 🦀 and \u{7f} and \t tab",
            json!({"k": "v"}),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut reference = Ledger::open_writer(&dir.path().join("ref.db"), 5_000).unwrap();
    let clock = Clock::pinned(TS).unwrap();
    let want: Vec<Event> = inputs
        .iter()
        .map(|e| reference.append_unchecked(e, &clock).unwrap())
        .collect();
    let mut c = log.connect();
    let got: Vec<Event> = inputs
        .iter()
        .map(|e| c.append_one(e, TS).unwrap())
        .collect();
    assert_eq!(got, want, "what the append returns");
    assert_eq!(all(&c), want, "what is stored");
    assert_chained(&want);
}

/// An append whose checks read nothing of the ledger ([`Writer::append_independent`]: on
/// PostgreSQL the server links it) makes the event a SQLite ledger's append makes, from the
/// first event on, between ordinary appends, odd texts and all; the log holds what it
/// returned.
pub(crate) fn independent_appends_are_what_pmm_append_writes(log: impl Fresh) {
    let inputs = [
        event(Kind::UserMessage, "first, on an empty log", json!({})),
        event(
            Kind::AssistantMessage,
            "it's a \\ back'slash $$ \u{0} é😀\n\"quoted\" \u{7f}",
            json!({"source": "contract", "q": "it's \\ 'x' \u{1}", "a": {"é": [1, 2.5, null]}}),
        ),
        event(Kind::TestEvent, "", json!({"big": 12345678901234567890u64})),
        event(Kind::Reflection, "x", json!({"k": "v"})),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut reference = Ledger::open_writer(&dir.path().join("ref.db"), 5_000).unwrap();
    let clock = Clock::pinned(TS).unwrap();
    let mut want = Vec::new();
    let mut got = Vec::new();
    let mut c = log.connect();
    for (i, e) in inputs.iter().enumerate() {
        want.push(reference.append_unchecked(e, &clock).unwrap());
        got.push(match i % 2 {
            0 => c.append_independent(e, &clock).unwrap(),
            _ => c.append_one(e, TS).unwrap(),
        });
        // And one more the independent way after an ordinary append.
        want.push(reference.append_unchecked(e, &clock).unwrap());
        got.push(c.append_independent(e, &clock).unwrap());
    }
    // All of them at once, each handed over in order as it is committed (PostgreSQL links
    // them in one round trip; one too big for it goes its own way, between the others).
    let mut group = inputs.to_vec();
    group.insert(
        2,
        event(Kind::UserMessage, &"big ".repeat(20_000), json!({})),
    );
    for e in &group {
        want.push(reference.append_unchecked(e, &clock).unwrap());
    }
    c.append_independents(&group, &clock, &mut |e| {
        got.push(e);
        Ok(())
    })
    .unwrap();
    assert_eq!(got, want, "what the append returns");
    assert_eq!(
        all(&c),
        want,
        "what is stored (and read back through this connection)"
    );
    assert_eq!(all(&log.connect()), want, "what another connection reads");
    assert_chained(&want);
}

/// Independent appends and transactions of their own on several connections at once: every
/// event once, ids gap-free, every link to the event before.
pub(crate) fn independent_and_transacted_appends_at_once_never_fork(log: impl Fresh) {
    let clock = Clock::pinned(TS).unwrap();
    writers_at_once(&log, &|c, ev, n| {
        match n % 3 {
            0 => c.append_one(ev, TS).unwrap(),
            _ => c.append_independent(ev, &clock).unwrap(),
        };
    });
}

/// An independent append that waits for another writer's transaction links to what that
/// transaction appended.
pub(crate) fn an_independent_append_links_to_the_new_head(log: impl Fresh) {
    let clock = Clock::pinned(TS).unwrap();
    a_waiter_links_to_the_new_head(&log, &|c, ev| c.append_independent(ev, &clock).unwrap());
}

/// Writers on several connections at once, each appending in transactions of its own: every
/// event is there once, ids gap-free, every link to the event before (no fork).
pub(crate) fn concurrent_writers_never_fork(log: impl Fresh) {
    writers_at_once(&log, &|c, ev, _| {
        c.append_one(ev, TS).unwrap();
    });
}

/// Four connections at once, each appending 25 events with `append(connection, event, n)`
/// (`n`: the writer's number plus the event's); then every event is there once, ids gap-free,
/// every link to the event before.
fn writers_at_once<F: Fresh>(log: &F, append: &(dyn Fn(&mut F::Conn, &NewEvent, usize) + Sync)) {
    const WRITERS: usize = 4;
    const EACH: usize = 25;
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            s.spawn(move || {
                let mut c = log.connect();
                for i in 0..EACH {
                    let ev = event(Kind::TestEvent, &format!("writer {w} event {i}"), json!({}));
                    append(&mut c, &ev, w + i);
                }
            });
        }
    });
    let events = all(&log.connect());
    assert_eq!(events.len(), WRITERS * EACH);
    assert_chained(&events);
    let mut contents: Vec<&str> = events.iter().map(|e| e.content.as_str()).collect();
    contents.sort_unstable();
    contents.dedup();
    assert_eq!(contents.len(), WRITERS * EACH, "every event once");
}

/// A writer that waits for another's transaction links to what that transaction appended,
/// not to the head it would have read before waiting.
pub(crate) fn a_waiting_writer_links_to_the_new_head(log: impl Fresh) {
    a_waiter_links_to_the_new_head(&log, &|c, ev| c.append_one(ev, TS).unwrap());
}

/// A writer that appends with `append` while another connection's transaction holds the
/// write (started after it, so that it must wait) links to what that transaction appended.
fn a_waiter_links_to_the_new_head<F: Fresh>(
    log: &F,
    append: &(dyn Fn(&mut F::Conn, &NewEvent) -> Event + Sync),
) {
    log.connect().append_one(&numbered(0), TS).unwrap();
    let (started, wait) = mpsc::channel::<()>();
    let second = std::thread::scope(|s| {
        let waiter = s.spawn(move || {
            let mut c = log.connect();
            wait.recv().unwrap();
            append(&mut c, &numbered(2))
        });
        let mut c = log.connect();
        let first = c
            .transact(&mut |tx| {
                let e = tx.append_linked(&numbered(1), TS)?;
                // The other writer starts now and must wait for this transaction.
                let _ = started.send(());
                std::thread::sleep(Duration::from_millis(300));
                Ok(e)
            })
            .unwrap();
        let second = waiter.join().unwrap();
        assert_eq!(second.prev_hash, first.hash, "linked to the new head");
        second
    });
    assert_eq!(second.id, 3);
    assert_chained(&all(&log.connect()));
}

/// A chain of `n` events as another ledger holds it: odd timestamps, meta text as stored.
fn source_chain(n: usize) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    let mut scratch = Vec::new();
    for i in 0..n {
        let head = out.last().map(|e| Head {
            id: e.id,
            hash: e.hash.clone(),
        });
        let ev = numbered(i);
        let ts = format!("2024-02-29T23:59:{:02}.{:06}Z", i % 60, i * 7);
        out.push(
            link(
                head.as_ref(),
                &ev.kind,
                &ev.content,
                &ev.meta,
                &ts,
                &mut scratch,
            )
            .unwrap(),
        );
    }
    out
}

/// An import keeps ids, timestamps, meta text and hashes exactly.
pub(crate) fn insert_verbatim_keeps_ids_ts_and_hashes(log: impl Fresh) {
    let source = source_chain(6);
    let mut c = log.connect();
    c.transact(&mut |tx| {
        for e in &source[..4] {
            tx.insert_verbatim(e, Links::Continue)?;
        }
        Ok(())
    })
    .unwrap();
    // A continuation of the head, in another transaction.
    c.transact(&mut |tx| {
        for e in &source[4..] {
            tx.insert_verbatim(e, Links::Continue)?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(all(&c), source);
    // Appends go on after the imported head.
    let next = c.append_one(&numbered(9), TS).unwrap();
    assert_eq!(next.id, 7);
    assert_eq!(next.prev_hash, source[5].hash);
}

/// A verbatim event that does not continue the head is refused, and nothing of its
/// transaction is written; a broken link is kept only when the caller says so.
pub(crate) fn insert_verbatim_refuses_a_fork_unless_told(log: impl Fresh) {
    let source = source_chain(4);
    let mut c = log.connect();
    c.transact(&mut |tx| {
        for e in &source[..3] {
            tx.insert_verbatim(e, Links::Continue)?;
        }
        Ok(())
    })
    .unwrap();
    let before = all(&c);
    // Event 4 linking to event 2 instead of 3: a second child of event 2.
    let mut fork = source[3].clone();
    fork.prev_hash = source[1].hash.clone();
    let refused = c.transact(&mut |tx| {
        tx.insert_verbatim(&source[3], Links::Continue)?;
        tx.insert_verbatim(&fork, Links::Continue)
    });
    assert!(refused.is_err(), "a fork is refused");
    assert_eq!(
        all(&c),
        before,
        "nothing of the refused transaction is written"
    );
    // An id that skips one.
    let mut gap = source[3].clone();
    gap.id = 5;
    for links in [Links::Continue, Links::AcceptBroken] {
        let err = c.transact(&mut |tx| tx.insert_verbatim(&gap, links));
        assert!(err.is_err(), "an id gap is refused ({links:?})");
    }
    // A broken link to a hash the log does not hold, kept verbatim when asked.
    let mut broken = source[3].clone();
    broken.prev_hash = Some("f".repeat(64));
    assert!(c
        .transact(&mut |tx| tx.insert_verbatim(&broken, Links::Continue))
        .is_err());
    c.transact(&mut |tx| tx.insert_verbatim(&broken, Links::AcceptBroken))
        .unwrap();
    assert_eq!(c.get(4).unwrap(), Some(broken));
    assert_eq!(all(&c).len(), 4);
}

/// The same event twice (its hash repeated) is refused even when broken links are accepted:
/// the log never holds two events with one hash.
pub(crate) fn a_repeated_hash_is_an_error_never_a_state(log: impl Fresh) {
    let source = source_chain(3);
    let mut c = log.connect();
    c.transact(&mut |tx| {
        for e in &source {
            tx.insert_verbatim(e, Links::Continue)?;
        }
        Ok(())
    })
    .unwrap();
    let mut again = source[1].clone();
    again.id = 4;
    let err = c.transact(&mut |tx| tx.insert_verbatim(&again, Links::AcceptBroken));
    assert!(err.is_err(), "a repeated hash is refused");
    assert_eq!(all(&c), source);
    assert_eq!(
        c.id_of_hash(source[1].hash.as_deref().unwrap()).unwrap(),
        Some(2)
    );
}

/// A transaction whose work fails leaves nothing behind, and the log goes on.
pub(crate) fn a_failed_transaction_leaves_nothing(log: impl Fresh) {
    let mut c = log.connect();
    c.append_one(&numbered(0), TS).unwrap();
    let err: Result<()> = c.transact(&mut |tx| {
        tx.append_linked(&numbered(1), TS)?;
        tx.append_linked(&numbered(2), TS)?;
        Err(crate::Error::bad_input(None, "the caller gave up"))
    });
    assert!(err.is_err());
    assert_eq!(c.head().unwrap().map(|h| h.id), Some(1));
    assert_eq!(c.get(2).unwrap(), None);
    assert_eq!(
        log.connect().get(2).unwrap(),
        None,
        "not on another connection either"
    );
    let e = c.append_one(&numbered(3), TS).unwrap();
    assert_eq!(e.id, 2);
    assert_chained(&all(&c));
}

/// `get`, `scan`, `tail` and the counts give the same events for the same filter.
pub(crate) fn get_scan_and_tail_agree(log: impl Fresh) {
    let mut c = log.connect();
    const N: usize = 30;
    c.transact(&mut |tx| {
        for i in 0..N {
            tx.append_linked(&numbered(i), TS)?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(c.get(0).unwrap(), None);
    assert_eq!(c.get(N as i64 + 1).unwrap(), None);
    let by_id: Vec<Event> = (1..=N as i64)
        .map(|id| c.get(id).unwrap().unwrap())
        .collect();
    scans_and_tails_agree(&c, &by_id);
    counts_and_hashes_agree(&c, &by_id);
    // Inside a transaction, reads see the log as the transaction does.
    c.transact(&mut |tx: &mut dyn Txn| {
        let e = tx.append_linked(&numbered(N), TS)?;
        assert_eq!(tx.get(e.id)?.as_ref(), Some(&e));
        assert_eq!(tx.tail(&Filter::default(), 1)?, vec![e]);
        Ok(())
    })
    .unwrap();
}

/// [`get_scan_and_tail_agree`]'s filters: `scan` and `tail` give the events `get` gave
/// (`by_id`) that pass each; a scan stops when told.
fn scans_and_tails_agree(c: &impl EventLog, by_id: &[Event]) {
    let kinds = |ks: &[Kind]| ks.to_vec();
    let filters = [
        Filter::default(),
        Filter {
            since: Some(5),
            until: Some(17),
            kinds: vec![],
        },
        Filter {
            since: None,
            until: None,
            kinds: kinds(&[Kind::UserMessage]),
        },
        Filter {
            since: Some(3),
            until: None,
            kinds: kinds(&[Kind::UserMessage, Kind::TestEvent]),
        },
        Filter {
            since: Some(40),
            until: None,
            kinds: vec![],
        },
    ];
    for f in &filters {
        let want: Vec<Event> = by_id
            .iter()
            .filter(|e| {
                f.since.is_none_or(|s| e.id >= s)
                    && f.until.is_none_or(|u| e.id <= u)
                    && (f.kinds.is_empty() || f.kinds.iter().any(|k| k == e.kind.as_str()))
            })
            .cloned()
            .collect();
        let mut scanned = Vec::new();
        c.scan(f, &mut |e| {
            scanned.push(e);
            Ok(true)
        })
        .unwrap();
        assert_eq!(scanned, want, "scan {f:?}");
        for n in [0, 1, 4, 100] {
            let tail = c.tail(f, n).unwrap();
            assert_eq!(tail, want[want.len().saturating_sub(n)..], "tail {n} {f:?}");
        }
    }
    // A scan stops when told.
    let mut seen = 0;
    c.scan(&Filter::default(), &mut |_| {
        seen += 1;
        Ok(seen < 3)
    })
    .unwrap();
    assert_eq!(seen, 3);
}

/// [`get_scan_and_tail_agree`]'s counts by kind and lookups by hash.
fn counts_and_hashes_agree(c: &impl EventLog, by_id: &[Event]) {
    for kind in [Kind::UserMessage, Kind::AssistantMessage, Kind::Reflection] {
        for after in [0, 10, 29, 30] {
            let want = by_id
                .iter()
                .filter(|e| e.kind == kind && e.id > after)
                .count() as u64;
            assert_eq!(c.count_kind_after(kind.clone(), after).unwrap(), want);
        }
    }
    for e in by_id {
        assert_eq!(
            c.id_of_hash(e.hash.as_deref().unwrap()).unwrap(),
            Some(e.id)
        );
    }
    assert_eq!(c.id_of_hash(&"0".repeat(64)).unwrap(), None);
}

/// Today's SQLite store.
pub(crate) struct Sqlite {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl Sqlite {
    pub(crate) fn new() -> Sqlite {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("contract.db");
        Sqlite { _dir: dir, path }
    }
}

impl Fresh for Sqlite {
    type Conn = Ledger;
    fn connect(&self) -> Ledger {
        Ledger::open_writer(&self.path, 30_000).unwrap()
    }
}

mod sqlite {
    use super::Sqlite;
    contract_suite!(Some(Sqlite::new()));
}

/// The in-memory log ([`super::memory::Memory`]): every connection a clone of one.
impl Fresh for super::memory::Memory {
    type Conn = super::memory::Memory;
    fn connect(&self) -> super::memory::Memory {
        self.clone()
    }
}

mod memory {
    contract_suite!(Some(crate::store::memory::Memory::new()));
}

/// The reads by kind (newest first, the newest matching a text, counts, the head's id, a
/// shared read) give what a scan of the whole log gives: a backend answers them from an index
/// or from the trait's provided methods, never differently.
pub(crate) fn reads_by_kind_agree_with_a_scan(log: impl Fresh) {
    let mut c = log.connect();
    assert_eq!(c.max_id().unwrap(), 0);
    assert!(!c.has_policy_config().unwrap());
    let configs = [
        r#"{"type":"retrieval","limit":3}"#,
        r#"{"forbid_sources":{},"type":"policy"}"#,
        r#"{"type":"retrieval","limit":5}"#,
    ];
    c.transact(&mut |tx| {
        // More user messages (every third event) than two pages of the provided
        // `newest_of_kind`.
        for i in 0..(3 * 2 * crate::store::log::NEWEST_PAGE + 30) {
            tx.append_linked(&numbered(i), TS)?;
            if i % 4 == 0 && i < 12 {
                let config = event(Kind::Config, configs[i / 4], json!({"source": "contract"}));
                tx.append_linked(&config, TS)?;
            }
        }
        Ok(())
    })
    .unwrap();
    let every = all(&c);
    assert_eq!(c.max_id().unwrap(), every.len() as i64);
    for kind in [Kind::Config, Kind::UserMessage, Kind::Erasure] {
        let newest_first: Vec<(i64, String)> = every
            .iter()
            .rev()
            .filter(|e| e.kind == kind)
            .map(|e| (e.id, e.content.clone()))
            .collect();
        let mut seen = Vec::new();
        c.newest_of_kind(kind.clone(), &mut |id, content| {
            seen.push((id, content.to_string()));
            true
        })
        .unwrap();
        assert_eq!(seen, newest_first, "{kind}");
        let mut calls = 0;
        c.newest_of_kind(kind.clone(), &mut |_, _| {
            calls += 1;
            calls < 3
        })
        .unwrap();
        assert_eq!(calls, newest_first.len().min(3), "{kind}: stops when told");
        let two: Vec<i64> = c
            .last_of_kind(kind.clone(), 2)
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        let want: Vec<i64> = newest_first.iter().take(2).map(|(id, _)| *id).collect();
        assert_eq!(two, want, "{kind}");
    }
    let retrieval = every
        .iter()
        .rev()
        .find(|e| e.content.contains("retrieval"))
        .map(|e| e.id);
    assert_eq!(
        c.find_kind_containing(Kind::Config, "retrieval").unwrap(),
        retrieval
    );
    assert_eq!(
        c.find_kind_containing(Kind::Config, "nothing").unwrap(),
        None
    );
    assert!(c.has_policy_config().unwrap());
    assert_eq!(c.last_erasure().unwrap(), 0);
    let third = c.get_shared(3).unwrap().unwrap();
    assert_eq!(*third, every[2]);
}
