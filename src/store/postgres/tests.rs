//! The contract suite on PostgreSQL, and what only PostgreSQL has to show: the append-only
//! guard, erasure, grants, forced isolation levels and the first writer's schema. Each case gets
//! a database of its own on one throwaway server per test process (`tests/it/pgserver.rs`);
//! without server binaries the cases skip, unless `PMM_REQUIRE_POSTGRES=1`.

#[path = "../../../tests/it/pgserver.rs"]
mod pgserver;

use super::PgLog;
use crate::event::{Kind, NewEvent};
use crate::store::contract::{Fresh, TS};
use crate::store::log::{EventLog, Writer};
use pgserver::PgServer;
use postgres::IsolationLevel;
use std::sync::OnceLock;

/// The server this test process shares (stopped by its watchdog when the process ends).
fn server() -> Option<&'static PgServer> {
    static SERVER: OnceLock<Option<PgServer>> = OnceLock::new();
    SERVER.get_or_init(PgServer::start).as_ref()
}

/// An empty ledger in a database of its own.
pub(crate) struct Postgres {
    url: String,
}

impl Postgres {
    /// A database of its own on this process's throwaway server; `None` without server
    /// binaries (unless `PMM_REQUIRE_POSTGRES=1`, which fails instead).
    pub(crate) fn new() -> Option<Postgres> {
        server().map(|s| Postgres { url: s.database() })
    }

    /// Its URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

impl Fresh for Postgres {
    type Conn = PgLog;
    fn connect(&self) -> PgLog {
        PgLog::open_writer(&self.url, 30_000).unwrap()
    }
}

mod contract {
    use super::Postgres;
    use crate::store::contract::contract_suite;
    contract_suite!(Postgres::new());
}

fn ev(i: usize) -> NewEvent {
    NewEvent::new(Kind::TestEvent, format!("event {i}"), Default::default()).unwrap()
}

/// The superuser's SQL in the ledger's database.
fn psql(url: &str, sql: &str) -> Result<String, String> {
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap();
    server().unwrap().psql(db, sql)
}

#[test]
fn the_events_table_refuses_update_delete_and_truncate() {
    let Some(pg) = Postgres::new() else { return };
    let mut c = pg.connect();
    for i in 0..3 {
        c.append_one(&ev(i), TS).unwrap();
    }
    for sql in [
        "UPDATE events SET content = 'changed'::bytea WHERE id = 2",
        "UPDATE events SET hash = 'x' WHERE id = 2",
        "DELETE FROM events WHERE id = 3",
        "TRUNCATE events CASCADE",
    ] {
        let err = psql(&pg.url, sql).unwrap_err();
        assert!(err.contains("append-only"), "{sql}: {err}");
    }
    // Even the erasure flag does not let a row's id, ts, kind or hashes change.
    let err = psql(
        &pg.url,
        "BEGIN; SET LOCAL pmm.erasing = 'on'; UPDATE events SET hash = 'x' WHERE id = 2; COMMIT;",
    )
    .unwrap_err();
    assert!(err.contains("append-only"), "{err}");
    assert_eq!(c.get(2).unwrap().unwrap().content, "event 1");
}

#[test]
fn erasure_goes_through_the_audited_function() {
    let Some(pg) = Postgres::new() else { return };
    let mut c = pg.connect();
    let kept = c.append_one(&ev(0), TS).unwrap();
    c.append_one(&ev(1), TS).unwrap();
    assert_eq!(
        psql(&pg.url, "SELECT pmm_erase_text(1)").unwrap().trim(),
        "t"
    );
    assert_eq!(
        psql(&pg.url, "SELECT pmm_erase_text(99)").unwrap().trim(),
        "f"
    );
    let erased = c.get(1).unwrap().unwrap();
    assert_eq!((erased.content.as_str(), erased.meta.as_str()), ("", "{}"));
    assert_eq!(
        (erased.id, &erased.hash, &erased.prev_hash),
        (1, &kept.hash, &None)
    );
    let audit = psql(&pg.url, "SELECT event_id, erased_by FROM pmm_erasures").unwrap();
    assert_eq!(audit.trim(), "1|postgres");
    // The flag does not outlive the function.
    let err = psql(
        &pg.url,
        "UPDATE events SET content = ''::bytea WHERE id = 2",
    )
    .unwrap_err();
    assert!(err.contains("append-only"), "{err}");
}

#[test]
fn a_writer_role_appends_and_cannot_update() {
    let Some(pg) = Postgres::new() else { return };
    pg.connect().append_one(&ev(0), TS).unwrap();
    let role = format!(
        "w_{}",
        pg.url
            .rsplit('/')
            .next()
            .unwrap()
            .split('?')
            .next()
            .unwrap()
    );
    psql(
        &pg.url,
        &format!(
            "CREATE ROLE {role} LOGIN;
             GRANT SELECT, INSERT ON events TO {role};
             GRANT SELECT, UPDATE ON pmm_head TO {role};
             GRANT SELECT ON pmm_schema, pmm_erasures TO {role};
             GRANT EXECUTE ON FUNCTION pmm_erase_text(bigint) TO {role};"
        ),
    )
    .unwrap();
    let url = pg.url.replace("postgres@", &format!("{role}@"));
    let mut w = PgLog::open_writer(&url, 5_000).unwrap();
    let e = w.append_one(&ev(1), TS).unwrap();
    assert_eq!(e.id, 2);
    let err = w
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
fn a_reader_never_creates_the_schema() {
    let Some(s) = server() else { return };
    let url = s.database();
    let err = PgLog::open_reader(&url).err().unwrap().to_string();
    assert!(err.contains("no pmm ledger in this database"), "{err}");
    assert_eq!(
        psql(&url, "SELECT to_regclass('events') IS NULL")
            .unwrap()
            .trim(),
        "t"
    );
}

#[test]
fn first_writers_at_once_create_the_schema_once() {
    let Some(s) = server() else { return };
    let url = s.database();
    std::thread::scope(|sc| {
        for _ in 0..4 {
            sc.spawn(|| {
                let mut c = PgLog::open_writer(&url, 30_000).unwrap();
                c.append_one(&ev(0), TS).unwrap();
            });
        }
    });
    let c = PgLog::open_reader(&url).unwrap();
    assert_eq!(c.head().unwrap().map(|h| h.id), Some(4));
    assert_eq!(
        psql(&url, "SELECT version FROM pmm_schema").unwrap().trim(),
        super::MIGRATIONS.len().to_string(),
        "every migration, applied once"
    );
}

/// Sessions forced to REPEATABLE READ or SERIALIZABLE (a pooler's or a policy's doing) get
/// serialization failures on the head row: they are retried, and the chain never forks.
#[test]
fn forced_stricter_isolation_is_retried_never_forked() {
    let Some(pg) = Postgres::new() else { return };
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
                let pg = &pg;
                sc.spawn(move || {
                    let mut c = pg.connect();
                    c.force_isolation(level);
                    for i in 0..20 {
                        c.append_one(&ev(w * 100 + i), TS).unwrap();
                    }
                    c.retries()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let c = pg.connect();
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
    eprintln!("forced isolation: {retries} transactions retried");
}

/// A lock wait past the busy timeout is "database is locked", as on SQLite.
#[test]
fn a_writer_that_waits_past_the_busy_timeout_is_busy() {
    let Some(pg) = Postgres::new() else { return };
    let mut holder = pg.connect();
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
        let mut late = PgLog::open_writer(&pg.url, 300).unwrap();
        let err = late.append_one(&ev(2), TS).unwrap_err();
        assert!(matches!(err, crate::Error::Busy(300)), "{err}");
        done.send(()).unwrap();
    });
    assert_eq!(pg.connect().head().unwrap().map(|h| h.id), Some(2));
}

#[test]
fn a_bad_url_is_refused_before_connecting() {
    let err = PgLog::open_writer("postgres://127.0.0.1:1/x?sslmode=disable&pool=3", 100)
        .err()
        .unwrap();
    assert_eq!(crate::error::ExitStatus::exit_code(&err), 2);
    assert!(err.to_string().contains("'pool' is not supported"), "{err}");
    let err = PgLog::open_writer("postgres://u:hunter2@127.0.0.1:1/x?sslmode=disable", 100)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("cannot connect"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

/// Appends per second with 1, 4 and 16 writers, each on its own connection appending events of
/// one shape in transactions of one event, on SQLite and on PostgreSQL (`$PMM_BENCH_PG_URL`,
/// else the throwaway server, whose fsync is off). Run by `scripts/pg-bench.sh`, beside
/// pgbench's floor: `cargo test --lib bench_appends -- --ignored --nocapture`.
#[test]
#[ignore = "a benchmark: scripts/pg-bench.sh runs it"]
fn bench_appends() {
    use crate::store::contract::Sqlite;
    let seconds: f64 = std::env::var("PMM_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let pg_url = std::env::var("PMM_BENCH_PG_URL").ok();
    fn run<F: Fresh>(log: &F, writers: usize, seconds: f64) -> f64 {
        // Every writer connects before any appends (a connection opened while 15 others
        // append back to back can wait past its busy timeout for SQLite's lock).
        let ready = std::sync::Barrier::new(writers + 1);
        let (deadline, start) = (std::sync::OnceLock::new(), std::sync::OnceLock::new());
        let total: usize = std::thread::scope(|sc| {
            let (ready, deadline_at) = (&ready, &deadline);
            let hs: Vec<_> = (0..writers)
                .map(|w| {
                    sc.spawn(move || {
                        let mut c = log.connect();
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
                            c.append_one(&e, TS).unwrap();
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
    for writers in [1, 4, 16] {
        let sqlite = run(&Sqlite::new(), writers, seconds);
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
                Some(Postgres { url: u.clone() })
            }
            None => Postgres::new(),
        };
        if let Some(pg) = pg {
            let rate = run(&pg, writers, seconds);
            println!("bench postgres writers={writers} appends_per_s={rate:.0}");
        }
    }
}
