//! The contract suite on [`Cached`], the type every program's PostgreSQL ledger is
//! (`store::Ledger::Cached`): its appends lock the server's head, catch the cache up, write
//! on the cache, push and commit the server then the cache, on the throwaway server of
//! `store/postgres/tests.rs`. Its connections are two hosts, each with a cache file of its own
//! that the connections of that host share, as programs on one host do.
//!
//! And what the server shows of appends made on that path: the append-only guard, erasure,
//! grants, forced isolation levels, the busy timeout, a head row that disagrees with the
//! events, the first writers' schema; and the library's append benchmark.

use super::{open_with_cache, Cached};
use crate::event::{Clock, Event, Kind, NewEvent};
use crate::store::contract::{Fresh, TS};
use crate::store::log::{EventLog, Writer};
use crate::store::postgres::tests::{psql, server, Postgres};
use crate::store::postgres::{PgLog, PREFETCH};
use postgres::IsolationLevel;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An empty PostgreSQL ledger and the cache directories of its hosts.
pub(crate) struct CachedPg {
    pg: Postgres,
    hosts: tempfile::TempDir,
    /// How many connections were opened (they go to `spread` hosts in turn).
    opened: AtomicUsize,
    /// How many hosts the connections are spread over.
    spread: usize,
}

impl CachedPg {
    /// `None` without server binaries (unless `PMM_REQUIRE_POSTGRES=1`).
    fn new() -> Option<CachedPg> {
        Some(CachedPg::on(Postgres::new()?, 2))
    }

    /// The ledger `pg`, its connections spread over `spread` hosts.
    fn on(pg: Postgres, spread: usize) -> CachedPg {
        CachedPg {
            pg,
            hosts: tempfile::tempdir().unwrap(),
            opened: AtomicUsize::new(0),
            spread,
        }
    }

    /// The ledger's URL.
    fn url(&self) -> &str {
        self.pg.url()
    }

    /// A writer on the host named `name` (a cache file of its own), waiting `busy_ms` at most.
    fn host(&self, name: &str, busy_ms: u64) -> Cached {
        host_at(self.url(), self.hosts.path(), name, busy_ms)
    }
}

/// A writer of the ledger at `url` on the host named `name`, its cache file under `dir`.
fn host_at(url: &str, dir: &Path, name: &str, busy_ms: u64) -> Cached {
    open_with_cache(url, true, busy_ms, &dir.join(name).join("pg.db")).unwrap()
}

impl Fresh for CachedPg {
    type Conn = Cached;
    fn connect(&self) -> Cached {
        let host = self.opened.fetch_add(1, Ordering::Relaxed) % self.spread;
        self.host(&format!("host{host}"), 30_000)
    }
}

mod contract {
    use crate::store::contract::contract_suite;
    contract_suite!(super::CachedPg::new());
}

fn ev(i: usize) -> NewEvent {
    NewEvent::new(Kind::TestEvent, format!("event {i}"), Default::default()).unwrap()
}

/// Every event of `l`, in id order.
fn all_events(l: &dyn EventLog) -> Vec<crate::event::Event> {
    let mut v = Vec::new();
    l.scan(&Default::default(), &mut |e| {
        v.push(e);
        Ok(true)
    })
    .unwrap();
    v
}

/// The server's rows, as a check that must see them reads them.
fn on_server(url: &str) -> PgLog {
    PgLog::open_reader(url).unwrap()
}

#[test]
fn the_events_table_refuses_update_delete_and_truncate() {
    let Some(log) = CachedPg::new() else { return };
    let mut c = log.connect();
    for i in 0..3 {
        c.append_one(&ev(i), TS).unwrap();
    }
    for sql in [
        "UPDATE events SET content = 'changed'::bytea WHERE id = 2",
        "UPDATE events SET hash = 'x' WHERE id = 2",
        "DELETE FROM events WHERE id = 3",
        "TRUNCATE events CASCADE",
    ] {
        let err = psql(log.url(), sql).unwrap_err();
        assert!(err.contains("append-only"), "{sql}: {err}");
    }
    // Even the erasure flag does not let a row's id, ts, kind or hashes change.
    let err = psql(
        log.url(),
        "BEGIN; SET LOCAL pmm.erasing = 'on'; UPDATE events SET hash = 'x' WHERE id = 2; COMMIT;",
    )
    .unwrap_err();
    assert!(err.contains("append-only"), "{err}");
    assert_eq!(
        on_server(log.url()).get(2).unwrap().unwrap().content,
        "event 1"
    );
}

#[test]
fn erasure_goes_through_the_audited_function() {
    let Some(log) = CachedPg::new() else { return };
    let mut c = log.connect();
    let kept = c.append_one(&ev(0), TS).unwrap();
    c.append_one(&ev(1), TS).unwrap();
    assert_eq!(
        psql(log.url(), "SELECT pmm_erase_text(1)").unwrap().trim(),
        "t"
    );
    assert_eq!(
        psql(log.url(), "SELECT pmm_erase_text(99)").unwrap().trim(),
        "f"
    );
    let erased = on_server(log.url()).get(1).unwrap().unwrap();
    assert_eq!((erased.content.as_str(), erased.meta.as_str()), ("", "{}"));
    assert_eq!(
        (erased.id, &erased.hash, &erased.prev_hash),
        (1, &kept.hash, &None)
    );
    let audit = psql(log.url(), "SELECT event_id, erased_by FROM pmm_erasures").unwrap();
    assert_eq!(audit.trim(), "1|postgres");
    // The flag does not outlive the function.
    let err = psql(
        log.url(),
        "UPDATE events SET content = ''::bytea WHERE id = 2",
    )
    .unwrap_err();
    assert!(err.contains("append-only"), "{err}");
}

#[test]
fn a_writer_role_appends_and_cannot_update() {
    let Some(log) = CachedPg::new() else { return };
    log.connect().append_one(&ev(0), TS).unwrap();
    let db = log
        .url()
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap();
    let role = format!("w_{db}");
    // The writer's grants of docs/scale-out.md.
    psql(
        log.url(),
        &format!(
            "CREATE ROLE {role} LOGIN;
             GRANT SELECT, INSERT ON events TO {role};
             GRANT SELECT, UPDATE ON pmm_head TO {role};
             GRANT SELECT ON pmm_schema, pmm_erasures TO {role};
             GRANT SELECT, INSERT ON pmm_vectors, pmm_embed_models TO {role};
             GRANT USAGE ON SEQUENCE pmm_vectors_seq_seq TO {role};
             GRANT EXECUTE ON FUNCTION pmm_erase_text(bigint) TO {role};"
        ),
    )
    .unwrap();
    let url = log.url().replace("postgres@", &format!("{role}@"));
    let mut w = host_at(&url, log.hosts.path(), "role", 5_000);
    let e = w.append_one(&ev(1), TS).unwrap();
    assert_eq!(e.id, 2);
    let err = PgLog::open_writer(&url, 5_000)
        .unwrap()
        .execute_batch("UPDATE events SET content = ''::bytea WHERE id = 1")
        .unwrap_err()
        .to_string();
    assert!(err.contains("permission denied"), "{err}");
    assert!(!err.contains("secret"), "the URL's password is never shown");
    // A reader opens it and cannot write.
    let r = PgLog::open_reader(&url).unwrap();
    assert_eq!(r.head().unwrap().map(|h| h.id), Some(2));
    let err = r
        .execute_batch("INSERT INTO pmm_head VALUES (false, 0, NULL)")
        .unwrap_err()
        .to_string();
    assert!(err.contains("read-only"), "{err}");
}

#[test]
fn first_writers_at_once_create_the_schema_once() {
    let Some(s) = server() else { return };
    let url = s.database();
    let hosts = tempfile::tempdir().unwrap();
    std::thread::scope(|sc| {
        for h in 0..4 {
            let (url, hosts) = (&url, hosts.path());
            sc.spawn(move || {
                let mut c = host_at(url, hosts, &format!("host{h}"), 30_000);
                c.append_one(&ev(0), TS).unwrap();
            });
        }
    });
    let c = on_server(&url);
    assert_eq!(c.head().unwrap().map(|h| h.id), Some(4));
    assert_eq!(
        psql(&url, "SELECT version FROM pmm_schema").unwrap().trim(),
        crate::store::postgres::MIGRATIONS.len().to_string(),
        "every migration, applied once"
    );
}

/// Sessions forced to REPEATABLE READ or SERIALIZABLE (a pooler's or a policy's doing) get
/// serialization failures on the head row: the lock is taken again, and the chain never forks.
#[test]
fn forced_stricter_isolation_is_retried_never_forked() {
    let Some(log) = CachedPg::new() else { return };
    let levels = [
        IsolationLevel::RepeatableRead,
        IsolationLevel::Serializable,
        IsolationLevel::RepeatableRead,
        IsolationLevel::Serializable,
    ];
    let retries: u64 = std::thread::scope(|sc| {
        let handles: Vec<_> = levels
            .iter()
            .enumerate()
            .map(|(w, &level)| {
                let log = &log;
                sc.spawn(move || {
                    let mut c = log.connect();
                    c.server_mut().force_isolation(level);
                    let clock = Clock::pinned(TS).unwrap();
                    for i in 0..20 {
                        match i % 2 {
                            0 => c.append_one(&ev(w * 100 + i), TS).unwrap(),
                            _ => c.append_independent(&ev(w * 100 + i), &clock).unwrap(),
                        };
                    }
                    c.server_mut().retries()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let c = on_server(log.url());
    let mut prev: Option<String> = None;
    let mut n = 0;
    c.scan(&Default::default(), &mut |e| {
        n += 1;
        assert_eq!(e.id, n);
        assert_eq!(e.prev_hash, prev);
        prev = e.hash;
        Ok(true)
    })
    .unwrap();
    assert_eq!(n, 80);
    eprintln!("forced isolation: {retries} head locks taken again");
}

/// A lock wait past the busy timeout is "database is locked", as on SQLite.
#[test]
fn a_writer_that_waits_past_the_busy_timeout_is_busy() {
    let Some(log) = CachedPg::new() else { return };
    let mut holder = log.host("holder", 30_000);
    holder.append_one(&ev(0), TS).unwrap();
    let (locked, wait) = std::sync::mpsc::channel();
    let (done, release) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|sc| {
        sc.spawn(move || {
            holder
                .transact(&mut |tx| {
                    let _ = locked.send(());
                    let _ = release.recv_timeout(std::time::Duration::from_secs(10));
                    tx.append_linked(&ev(1), TS)
                })
                .unwrap();
        });
        wait.recv().unwrap();
        // Another host: its cache file is not the holder's (whose lock it would wait on).
        let mut late = log.host("late", 300);
        let err = late.append_one(&ev(2), TS).unwrap_err();
        assert!(matches!(err, crate::Error::Busy(300)), "{err}");
        done.send(()).unwrap();
    });
    assert_eq!(on_server(log.url()).head().unwrap().map(|h| h.id), Some(2));
}

/// A head row that does not say where the events end (moved behind pmm's back, either way)
/// is refused before anything is written, by a host whose cache holds the events and by a new
/// one: appending would reuse ids or leave a gap.
#[test]
fn an_append_refuses_a_head_row_that_disagrees_with_the_events() {
    let Some(log) = CachedPg::new() else { return };
    let mut kept = log.host("kept", 30_000);
    for i in 0..3 {
        kept.append_one(&ev(i), TS).unwrap();
    }
    for row in [1, 5] {
        psql(log.url(), &format!("UPDATE pmm_head SET id = {row}")).unwrap();
        let refused = |c: &mut Cached, which: &str| {
            let err = c.append_one(&ev(9), TS).unwrap_err();
            let said = err.to_string();
            // The server refuses to link it (a repeated id, or a gap it cannot see): the
            // host's append says why.
            let clock = Clock::pinned(TS).unwrap();
            let independent = c.append_independent(&ev(9), &clock).unwrap_err();
            assert_eq!(
                independent.to_string(),
                said,
                "{which}: linked by the server"
            );
            assert_eq!(c.server_mut().linked_here(), 0, "{which}");
            assert!(
                matches!(err, crate::Error::Damaged { .. }),
                "{which}: {said}"
            );
            let want =
                format!("the head row says {row} but the events end at 3; nothing was written");
            assert!(said.contains(&want), "{which}: {said}");
            assert_eq!(
                c.head().unwrap().map(|h| h.id),
                Some(3),
                "{which}: its cache"
            );
        };
        refused(&mut kept, "a host that holds the events");
        refused(&mut log.host(&format!("new{row}"), 30_000), "a new host");
        let server = on_server(log.url());
        assert_eq!(
            server.head().unwrap().map(|h| h.id),
            Some(3),
            "nothing written"
        );
        assert_eq!(
            psql(log.url(), "SELECT id FROM pmm_head").unwrap().trim(),
            row.to_string(),
            "the head row untouched"
        );
    }
}

/// A head row deleted behind pmm's back is no head: an append is refused, and nothing is
/// written (the lock's reply is read statement by statement, never by counting rows).
#[test]
fn an_append_refuses_a_missing_head_row() {
    let Some(log) = CachedPg::new() else { return };
    let mut a = log.host("a", 30_000);
    a.append_one(&ev(0), TS).unwrap();
    psql(log.url(), "DELETE FROM pmm_head").unwrap();
    let err = a.append_one(&ev(1), TS).unwrap_err().to_string();
    assert!(err.contains("the head row could not be read"), "{err}");
    assert_eq!(on_server(log.url()).max_id().unwrap(), 1, "nothing written");
}

/// A host far behind catches up page by page ([`super::PAGE`] events a read): a page that
/// ends exactly at the server's end, and one past it, leave nothing behind, and a short page
/// ends the catch-up without another read.
#[test]
fn a_cache_behind_by_more_than_a_page_catches_up_every_event() {
    let Some(log) = CachedPg::new() else { return };
    let page = super::PAGE as usize;
    let mut writer = log.host("writer", 30_000);
    let mut reader = log.host("reader", 30_000);
    let mut written = 0;
    for (batch, want) in [(page, page), (page + 1, 2 * page + 1)] {
        writer
            .transact(&mut |tx| {
                for i in 0..batch {
                    tx.append_linked(&ev(written + i), TS)?;
                }
                Ok(())
            })
            .unwrap();
        written += batch;
        assert_eq!(reader.refresh().unwrap(), batch as u64);
        assert_eq!(reader.max_id().unwrap(), want as i64);
        assert_eq!(reader.head().unwrap(), writer.head().unwrap());
    }
}

/// A writer's catch-up under the head lock reads nothing of its own when the other hosts
/// appended fewer events than the lock's round trip reads ([`PREFETCH`]), odd bytes and all,
/// and pages on from there when they appended more; its cache ends up as the server's.
#[test]
fn a_writer_behind_catches_up_from_the_locks_own_read() {
    let Some(log) = CachedPg::new() else { return };
    let mut a = log.host("a", 30_000);
    let mut b = log.host("b", 30_000);
    b.append_one(&ev(0), TS).unwrap();
    let odd = "it's a \\ back'slash $$ \u{0} é😀\n";
    let mut tricky = NewEvent::new(Kind::TestEvent, odd, Default::default()).unwrap();
    tricky.meta = serde_json::json!({"q": odd}).as_object().unwrap().clone();
    for n in [3, PREFETCH as usize + 10] {
        a.transact(&mut |tx| {
            for _ in 0..n {
                tx.append_linked(&tricky, TS)?;
            }
            Ok(())
        })
        .unwrap();
        let before = b.server_mut().reads_after();
        b.append_one(&ev(1), TS).unwrap();
        let reads = b.server_mut().reads_after() - before;
        assert_eq!(reads, u64::from(n as i64 >= PREFETCH), "{n} behind");
        assert_eq!(b.head().unwrap(), on_server(log.url()).head().unwrap());
        assert_eq!(all_events(&b), all_events(&on_server(log.url())));
    }
}

/// An independent append ([`Writer::append_independent`], what `pmm-append` makes of a plain
/// line) is linked by the server in the round trip that locks its head, which also reads the
/// events other hosts appended: the cache catches up to it without a read of its own, every
/// hash checked, and ends as the server's. A big event, or a reader's connection, is left to
/// the host's transaction.
#[test]
fn an_independent_append_is_linked_by_the_server_in_one_round_trip() {
    let Some(log) = CachedPg::new() else { return };
    let clock = Clock::pinned(TS).unwrap();
    let mut a = log.host("a", 30_000);
    let mut b = log.host("b", 30_000);
    let first = b.append_independent(&ev(0), &clock).unwrap();
    assert_eq!((first.id, &first.prev_hash), (1, &None), "the first event");
    a.transact(&mut |tx| {
        for i in 1..4 {
            tx.append_linked(&ev(i), TS)?;
        }
        Ok(())
    })
    .unwrap();
    let reads = b.server_mut().reads_after();
    let e = b.append_independent(&ev(4), &clock).unwrap();
    assert_eq!(e.id, 5);
    assert_eq!(b.server_mut().linked_here(), 2, "both linked by the server");
    assert_eq!(b.server_mut().reads_after(), reads, "no read of its own");
    assert_eq!(b.head().unwrap(), on_server(log.url()).head().unwrap());
    assert_eq!(all_events(&b), all_events(&on_server(log.url())));
    assert_eq!(
        b.get(5).unwrap().unwrap(),
        e,
        "the cache holds what it returned"
    );
    // Too big for one message: the host links it.
    let big = NewEvent::new(Kind::TestEvent, "x".repeat(20_000), Default::default()).unwrap();
    let e = b.append_independent(&big, &clock).unwrap();
    assert_eq!((e.id, b.server_mut().linked_here()), (6, 2));
    assert_eq!(on_server(log.url()).get(6).unwrap().unwrap(), e);
    // Several at once: one transaction on the server, the cache caught up to them all.
    let group: Vec<NewEvent> = (8..13).map(ev).collect();
    let mut got = Vec::new();
    b.append_independents(&group, &clock, &mut |e| {
        got.push(e);
        Ok(())
    })
    .unwrap();
    assert_eq!(
        got.iter().map(|e| e.id).collect::<Vec<_>>(),
        [7, 8, 9, 10, 11]
    );
    assert_eq!(b.server_mut().linked_here(), 7);
    let xacts = psql(
        log.url(),
        "SELECT count(DISTINCT xmin::text) FROM events WHERE id BETWEEN 7 AND 11",
    )
    .unwrap();
    assert_eq!(xacts.trim(), "1", "one transaction");
    assert_eq!(all_events(&b), all_events(&on_server(log.url())));
    // Its statements gone from the connection (a `DISCARD ALL`): the host links the next
    // event, and the statements are prepared again for the one after.
    b.server_mut()
        .execute_batch("DEALLOCATE pmm_link_v1")
        .unwrap();
    assert_eq!(b.append_independent(&ev(13), &clock).unwrap().id, 12);
    assert_eq!(b.server_mut().linked_here(), 7, "the host linked it");
    assert_eq!(b.append_independent(&ev(14), &clock).unwrap().id, 13);
    assert_eq!(b.server_mut().linked_here(), 8, "prepared again");
    // Gone twice (a pooler handing each transaction another connection): never again on
    // this connection, every append the host's.
    b.server_mut()
        .execute_batch("DEALLOCATE pmm_link_v1")
        .unwrap();
    for i in 15..17 {
        b.append_independent(&ev(i), &clock).unwrap();
    }
    assert_eq!(b.server_mut().linked_here(), 8, "the host linked them");
    // A reader's connection appends nothing, either way.
    let mut r =
        open_with_cache(log.url(), false, 5_000, &log.hosts.path().join("r/pg.db")).unwrap();
    let err = r.append_independent(&ev(7), &clock).unwrap_err();
    assert!(err.to_string().contains("opened for reading"), "{err}");
    assert_eq!(on_server(log.url()).max_id().unwrap(), 15);
    assert_eq!(all_events(&b), all_events(&on_server(log.url())));
}

/// A connection the server closed while the host was idle (an idle-session timeout, a
/// restart) is found closed by the append the server was to link: connected again, the host
/// asks whether it was committed (it was not), and appends it once.
#[test]
fn an_independent_append_after_the_server_closed_the_connection_is_appended_once() {
    let Some(log) = CachedPg::new() else { return };
    let clock = Clock::pinned(TS).unwrap();
    let mut a = log.host("a", 30_000);
    a.append_independent(&ev(0), &clock).unwrap();
    a.server_mut()
        .execute_batch("SET idle_session_timeout = '200ms'")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    let e = a.append_independent(&ev(1), &clock).unwrap();
    assert_eq!(e.id, 2);
    let server = on_server(log.url());
    assert_eq!(server.max_id().unwrap(), 2, "appended once");
    assert_eq!(all_events(&a), all_events(&server));
    // And the next is linked by the server on the new connection.
    assert_eq!(a.append_independent(&ev(2), &clock).unwrap().id, 3);
    assert_eq!(a.server_mut().linked_here(), 2);
}

/// The prepared read of a catch-up after an append the server linked reads as many events as
/// the head lock's own read.
#[test]
fn the_prepared_read_after_a_link_reads_a_prefetch() {
    let sql = crate::store::postgres::PREPARE_AT_HEAD;
    assert!(
        sql.contains(&format!("LIMIT {PREFETCH}\"")) || sql.ends_with(&format!("LIMIT {PREFETCH}")),
        "{sql}"
    );
}

/// An append of a few events is one statement whose values are written as SQL text, a big
/// one a binary `COPY`, and events the server links are `EXECUTE`d with the same values: all
/// store exactly the bytes the cache holds (quotes, backslashes, dollar signs, NUL, astral
/// characters, a line break), even with the server's `standard_conforming_strings` off, and a
/// new host catches them up with every hash checked.
#[test]
fn a_small_and_a_big_push_store_the_same_bytes_as_the_cache() {
    let Some(log) = CachedPg::new() else { return };
    let db = psql(log.url(), "SELECT current_database()").unwrap();
    psql(
        log.url(),
        &format!(
            "ALTER DATABASE {} SET standard_conforming_strings = off",
            db.trim()
        ),
    )
    .unwrap();
    let mut host = log.host("a", 30_000);
    let odd = "it's a \\ back'slash $$ $x$ -- ; DROP TABLE events; \0 \u{0} é😀\n'";
    let meta = serde_json::json!({"q": odd, "n": 1.5});
    let mut tricky = NewEvent::new(Kind::TestEvent, odd, Default::default()).unwrap();
    tricky.meta = meta.as_object().unwrap().clone();
    host.append_one(&tricky, TS).unwrap();
    host.append_one(&ev(1), TS).unwrap();
    let big = "x".repeat(40_000);
    host.transact(&mut |tx| {
        for _ in 0..3 {
            let mut e = tricky.clone();
            e.content = format!("{odd}{big}");
            tx.append_linked(&e, TS)?;
        }
        Ok(())
    })
    .unwrap();
    // And linked by the server: its hash of the same bytes is the host's.
    let clock = Clock::pinned(TS).unwrap();
    let twice = [tricky.clone(), tricky.clone()];
    host.append_independents(&twice, &clock, &mut |_| Ok(()))
        .unwrap();
    assert_eq!(host.server_mut().linked_here(), 2, "linked by the server");
    let all = all_events;
    let cached = all(&host);
    assert_eq!(cached.len(), 7);
    assert_eq!(all(&on_server(log.url())), cached, "the server's rows");
    // A new host's cache is caught up as it opens, each event's hash checked.
    let fresh = log.host("b", 30_000);
    assert_eq!(all(&fresh), cached, "a new host's cache");
    assert_eq!(
        psql(
            log.url(),
            "SELECT count(*) FROM events WHERE accepted_break"
        )
        .unwrap()
        .trim(),
        "0"
    );
}

/// Events 1..=n whose contents are `content(id)`, each linking to the one before, except
/// those `forked` names, which link to a hash no event has (a source's own fork).
fn chained(n: i64, forked: &[i64], content: &dyn Fn(i64) -> String) -> Vec<Event> {
    let mut prev: Option<String> = None;
    let mut scratch = Vec::new();
    (1..=n)
        .map(|id| {
            let link = match forked.contains(&id) {
                true => Some("f".repeat(64)),
                false => prev.clone(),
            };
            let text = content(id);
            let digest = crate::chain::event_digest(
                &mut scratch,
                Kind::TestEvent.as_str(),
                &text,
                &Default::default(),
                link.as_deref(),
            )
            .unwrap();
            prev = Some(digest.to_string());
            Event {
                id,
                ts: TS.into(),
                kind: Kind::TestEvent,
                content: text,
                meta: "{}".into(),
                prev_hash: link,
                hash: prev.clone(),
            }
        })
        .collect()
}

/// Issue 47: a long write (an import) pushes its events to the server as it goes, inside the
/// one locked transaction, so that the server's transaction never idles until the server ends
/// it. Pushed in pieces — a fork at the edge of one, a last push with nothing after it, then
/// one with events after it — the server holds what one push at the commit would have: the
/// same rows, the fork marked, the head row at the last event. Dropped uncommitted after its
/// pushes, nothing of it exists.
#[test]
fn a_write_pushed_in_pieces_before_its_commit_is_one_transaction() {
    let Some(log) = CachedPg::new() else { return };
    let events = chained(6, &[3], &|id| format!("event {id}"));
    let server_rows = || {
        psql(
            log.url(),
            "SELECT count(*), count(*) FILTER (WHERE accepted_break), \
             (SELECT id FROM pmm_head) FROM events",
        )
        .unwrap()
        .trim()
        .to_string()
    };
    let mut a = log.host("a", 30_000);
    {
        let mut tx = a.begin().unwrap();
        for (i, e) in events.iter().enumerate() {
            tx.insert_verbatim(e).unwrap();
            if i % 2 == 0 {
                tx.push().unwrap();
            }
        }
        tx.push().unwrap();
        // Dropped: the server rolls every push back.
    }
    assert_eq!(server_rows(), "0|0|0", "nothing of an uncommitted write");
    assert_eq!(a.head().unwrap(), None, "nor in the cache");

    // Pushed up to event 1, then event 2 (an ordinary link: the piece starts from what was
    // pushed, not from the head locked before it, or event 2 would read as a fork), then
    // events 3 (the fork) and 4, then nothing: the commit moves the head row to what was
    // pushed.
    let mut tx = a.begin().unwrap();
    tx.insert_verbatim(&events[0]).unwrap();
    tx.push().unwrap();
    tx.insert_verbatim(&events[1]).unwrap();
    tx.push().unwrap();
    for e in &events[2..4] {
        tx.insert_verbatim(e).unwrap();
    }
    tx.push().unwrap();
    tx.push().unwrap();
    tx.commit().unwrap();
    assert_eq!(server_rows(), "4|1|4");
    // Pushed up to event 5, then event 6 at the commit.
    let mut tx = a.begin().unwrap();
    tx.insert_verbatim(&events[4]).unwrap();
    tx.push().unwrap();
    tx.insert_verbatim(&events[5]).unwrap();
    tx.commit().unwrap();
    assert_eq!(server_rows(), "6|1|6");
    assert_eq!(
        all_events(&on_server(log.url())),
        events,
        "the server's rows"
    );
    assert_eq!(all_events(&a), events, "the cache's");
}

/// Appends per second with 1, 4 and 16 writers, each a host of its own (a connection and a
/// cache file) appending events of one shape, one at a time, through [`Cached`] as `pmm-append`
/// does ([`Writer::append_independent`], without a program's start), on SQLite and on
/// PostgreSQL (`$PMM_BENCH_PG_URL`, else the throwaway server, whose fsync is off). Run by
/// `scripts/pg-bench.sh --library`, beside pgbench's floor: `cargo test --lib bench_appends --
/// --ignored --nocapture`.
#[test]
#[ignore = "a benchmark: scripts/pg-bench.sh --library runs it"]
fn bench_appends() {
    use crate::store::contract::Sqlite;
    let seconds: f64 = std::env::var("PMM_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let pg_url = std::env::var("PMM_BENCH_PG_URL").ok();
    for writers in [1, 4, 16] {
        let sqlite = bench_run(&Sqlite::new(), writers, seconds);
        println!("bench sqlite writers={writers} appends_per_s={sqlite:.0}");
        let pg = match &pg_url {
            Some(u) => {
                // A fresh ledger each time: the URL's database, emptied by the superuser.
                let c = PgLog::open_writer(u, 30_000).unwrap();
                c.execute_batch(
                    "DROP TABLE IF EXISTS pmm_vectors, pmm_embed_models, pmm_erasures, events, pmm_head, pmm_schema CASCADE;
                     DROP FUNCTION IF EXISTS pmm_events_guard, pmm_erase_text;",
                )
                .unwrap();
                Some(Postgres::at(u))
            }
            None => Postgres::new(),
        };
        if let Some(pg) = pg {
            let rate = bench_run(&CachedPg::on(pg, usize::MAX), writers, seconds);
            println!("bench postgres writers={writers} appends_per_s={rate:.0}");
        }
    }
}

/// [`bench_appends`]' appends per second of `writers` connections of `log` for `seconds`.
fn bench_run<F: Fresh>(log: &F, writers: usize, seconds: f64) -> f64 {
    // Every writer connects before any appends (a connection opened while 15 others append
    // back to back can wait past its busy timeout for SQLite's lock).
    let ready = std::sync::Barrier::new(writers + 1);
    let (deadline, start) = (std::sync::OnceLock::new(), std::sync::OnceLock::new());
    let total: usize = std::thread::scope(|sc| {
        let (ready, deadline_at) = (&ready, &deadline);
        let hs: Vec<_> = (0..writers)
            .map(|w| {
                sc.spawn(move || {
                    let mut c = log.connect();
                    let clock = Clock::pinned(TS).unwrap();
                    ready.wait();
                    let deadline: std::time::Instant = *deadline_at.wait();
                    let mut n = 0;
                    while std::time::Instant::now() < deadline {
                        let e = NewEvent::new(
                            Kind::TestEvent,
                            format!("writer {w} event {n} {}", "x".repeat(40)),
                            Default::default(),
                        )
                        .unwrap();
                        // What `pmm-append` makes of a plain line.
                        c.append_independent(&e, &clock).unwrap();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        ready.wait();
        let now = std::time::Instant::now();
        start.set(now).unwrap();
        deadline
            .set(now + std::time::Duration::from_secs_f64(seconds))
            .unwrap();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    total as f64 / start.get().unwrap().elapsed().as_secs_f64()
}
