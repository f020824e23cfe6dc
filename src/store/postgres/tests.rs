//! The throwaway server of the PostgreSQL tests, and what a connection shows before anything
//! is appended: a reader never creates the schema, a bad URL is refused before connecting.
//! What needs events appends through the host cache, the path every program takes
//! (`store/replica/tests.rs`: the contract suite, the append-only guard, erasure, grants, forced
//! isolation levels, the busy timeout, a head row that disagrees with the events, the first
//! writers' schema, the append benchmark). Each case gets a database of its own on one
//! throwaway server per test process (`tests/it/pgserver.rs`); without server binaries the
//! cases skip, unless `PMM_REQUIRE_POSTGRES=1`.

#[path = "../../../tests/it/pgserver.rs"]
mod pgserver;

use super::PgLog;
use pgserver::PgServer;
use std::sync::OnceLock;

/// The server this test process shares (stopped by its watchdog when the process ends).
pub(crate) fn server() -> Option<&'static PgServer> {
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

    /// The ledger at `url` (a server of the caller's, not the throwaway one).
    pub(crate) fn at(url: &str) -> Postgres {
        Postgres {
            url: url.to_string(),
        }
    }

    /// Its URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

/// The superuser's SQL in the ledger's database.
pub(crate) fn psql(url: &str, sql: &str) -> Result<String, String> {
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap();
    server().unwrap().psql(db, sql)
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

#[test]
fn a_session_keeps_a_stricter_idle_timeout_and_never_a_looser_one() {
    let Some(s) = server() else { return };
    let url = s.database();
    // The first writer makes the schema; each setting is read by a new session.
    drop(PgLog::open_writer(&url, 1000).unwrap());
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap();
    for (setting, kept) in [
        ("1000", 1_000),
        ("'2s'", 2_000),
        ("0", super::IDLE_IN_TRANSACTION.as_millis() as u64),
        ("'1h'", super::IDLE_IN_TRANSACTION.as_millis() as u64),
    ] {
        psql(
            &url,
            &format!("ALTER DATABASE {db} SET idle_in_transaction_session_timeout = {setting}"),
        )
        .unwrap();
        let log = PgLog::open_writer(&url, 1000).unwrap();
        assert_eq!(
            log.idle_timeout(),
            std::time::Duration::from_millis(kept),
            "a database at {setting}"
        );
        assert_eq!(
            log.client
                .borrow_mut()
                .simple_query("SHOW idle_in_transaction_session_timeout")
                .unwrap()
                .iter()
                .find_map(|m| match m {
                    postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                    _ => None,
                })
                .unwrap(),
            if kept % 1000 == 0 && kept < 60_000 {
                format!("{}s", kept / 1000)
            } else {
                format!("{kept}ms")
            },
            "the session's own setting, a database at {setting}"
        );
    }
}
