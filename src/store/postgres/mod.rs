//! The ledger in PostgreSQL: the event log of [`super::log`] on a shared server, so
//! that writers on several hosts append to one chain.
//!
//! # What is here
//! - [`PgLog`]: a connection ([`PgLog::open_writer`], [`PgLog::open_reader`]) implementing
//!   [`EventLog`] (the server's rows, which a check that must see them reads). It has no write
//!   transaction of its own: every append is a host cache's (`store::replica::Cached`), through
//!   the operations of `locked` (below), and the contract suite (`store/contract.rs`) runs on
//!   that type against a throwaway server started from Debian's binaries
//!   (`tests/it/pgserver.rs`); this module's tests hold what only the server has to show.
//! - URLs ([`url`]): `postgres://` and `postgresql://` with `sslmode` (disable, prefer,
//!   require, verify-ca, verify-full), `sslrootcert`, `connect_timeout`, `application_name`,
//!   `host`, `port`, `user`, `password`, `dbname`; a password from the URL, `PGPASSWORD` or the
//!   password file (`PGPASSFILE`, `~/.pgpass`). Anything else is refused, never ignored.
//! - TLS through rustls ([`tls`]).
//! - The schema, a versioned append-only migration list ([`MIGRATIONS`], the version in
//!   `pmm_schema`), applied by the first writer under an advisory lock (two first writers do not
//!   both create it); a reader never creates anything and opens its session read-only. The
//!   `events` table has SQLite's columns (`id, ts, kind, content, meta, prev_hash, hash`; the
//!   content is `bytea`, so that any text an event holds, NUL included, round-trips), with
//!   `UNIQUE(hash)` and `UNIQUE(prev_hash)`: a fork is an error, never a state.
//! - An append (`locked`: `PgLog::lock_head`, `PgLog::push_and_commit`) is one short READ
//!   COMMITTED transaction around the host cache's own write: `SELECT … FROM pmm_head FOR
//!   UPDATE` (a waiter re-reads the row its predecessor updated, so it links to the new head;
//!   the same round trip reads the first events the cache lacks), the cache caught up to that
//!   head and refused when the head row and the events disagree, the cache's new events
//!   (linked by `super::log::link`, the bytes `pmm-append` writes) pushed, the head row moved
//!   and the transaction committed in one statement (a big push: one binary `COPY`, then the
//!   move and the commit; a long write's, such as an import's, several `COPY`s as it goes,
//!   within the session's idle timeout, [`PgLog::idle_timeout`]). Serialization failures (40001,
//!   when a session is forced to REPEATABLE READ or SERIALIZABLE) and deadlocks (40P01) of the
//!   lock are retried with jittered back-off until the busy timeout; a lock wait past it is
//!   [`crate::Error::Busy`], as on SQLite. Sessions set `idle_in_transaction_session_timeout`
//!   and `lock_timeout`, and TCP keepalives, so that a writer whose host died or was cut off
//!   frees the head lock.
//! - `events` refuses UPDATE, DELETE and TRUNCATE (a trigger), except the erasure of an
//!   event's text through `pmm_erase_text(id)`, which keeps id, ts, kind and hashes and records
//!   who erased what in `pmm_erasures`.
//!
//! # Roles
//! The owner of the schema (whoever ran the first writer) can do anything, triggers included.
//! The roles for everyone else:
//! - docs/scale-out.md lists the grants of a writer role and a reader role (a test runs them).
//!
//! # Programs
//! Every program opens a PostgreSQL ledger by URL through `store::Ledger`, as the host cache
//! `store::replica::Cached` (this module knows nothing of it, nor of SQLite): the events and
//! their derived indexes are cached on each host, and an append locks the head row around the
//! local write session (`PgLog::lock_head`, `PgLog::push_and_commit`). `docs/scale-out.md` is the
//! user's guide.
//!
//! # Next step
//! `pmm-replay --follow` woken by LISTEN/NOTIFY instead of polling (today it polls the
//! server every 200 ms).

mod host;
mod locked;
pub mod tls;
pub mod url;

use super::log::EventLog;
use super::{Filter, Head};
use crate::event::{Event, Kind};
use crate::{Error, Result};
use postgres::error::SqlState;
use postgres::{Client, GenericClient, IsolationLevel, NoTls, Row};
use std::cell::RefCell;
use std::time::Duration;

#[cfg(test)]
pub(crate) use locked::PREPARE_AT_HEAD;
pub(crate) use locked::{Feed, Link, Locked, SharedVector, Unlinked, AT_HEAD_MAX, PREFETCH};
pub use url::is_postgres_url;

/// Refuses a PostgreSQL URL where only a SQLite file's path is taken (exit 2): a `REF:`
/// target a model names is read at rest, never connected to.
pub fn refuse_url(path: &std::path::Path) -> Result<()> {
    match path.to_str() {
        Some(p) if is_postgres_url(p) => Err(Error::bad_input(
            Some("--db".into()),
            format!(
                "{}: a PostgreSQL URL, not a file path: only the path of a SQLite ledger file is taken here",
                url::shown(p)
            ),
        )),
        _ => Ok(()),
    }
}

/// The schema, one migration per entry, applied in order; `pmm_schema.version` counts how many
/// have been applied. Append only: never edit an entry that has shipped.
pub const MIGRATIONS: &[&str] = &[
    // 1: the events (SQLite's columns), the head row every append locks, the append-only
    // guard, and erasure.
    r#"
CREATE TABLE events (
    id BIGINT PRIMARY KEY CHECK (id >= 1),
    ts TEXT NOT NULL,
    kind TEXT NOT NULL,
    content BYTEA NOT NULL,
    meta TEXT NOT NULL,
    prev_hash TEXT,
    hash TEXT,
    CONSTRAINT events_hash_key UNIQUE (hash),
    CONSTRAINT events_prev_hash_key UNIQUE (prev_hash)
);
CREATE INDEX events_kind_id ON events (kind, id);
CREATE TABLE pmm_head (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    id BIGINT NOT NULL,
    hash TEXT
);
INSERT INTO pmm_head (one, id, hash) VALUES (TRUE, 0, NULL);
CREATE TABLE pmm_erasures (
    event_id BIGINT PRIMARY KEY REFERENCES events (id),
    erased_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    erased_by TEXT NOT NULL DEFAULT session_user
);
CREATE FUNCTION pmm_events_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF current_setting('pmm.erasing', true) = 'on'
           AND NEW.id = OLD.id AND NEW.ts = OLD.ts AND NEW.kind = OLD.kind
           AND NEW.prev_hash IS NOT DISTINCT FROM OLD.prev_hash
           AND NEW.hash IS NOT DISTINCT FROM OLD.hash THEN
            RETURN NEW;
        END IF;
    END IF;
    RAISE EXCEPTION 'the events table is append-only: % refused (erase an event''s text with pmm_erase_text)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER pmm_events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION pmm_events_guard();
CREATE TRIGGER pmm_events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION pmm_events_guard();
CREATE FUNCTION pmm_erase_text(target BIGINT) RETURNS BOOLEAN
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM set_config('pmm.erasing', 'on', true);
    UPDATE events SET content = ''::bytea, meta = '{}' WHERE id = target;
    IF NOT FOUND THEN
        PERFORM set_config('pmm.erasing', 'off', true);
        RETURN false;
    END IF;
    INSERT INTO pmm_erasures (event_id) VALUES (target);
    PERFORM set_config('pmm.erasing', 'off', true);
    RETURN true;
END
$$;
REVOKE ALL ON FUNCTION pmm_erase_text(BIGINT) FROM PUBLIC;
"#,
    // 2: an event imported with --accept-forks whose prev_hash is not its predecessor's hash
    // (a source ledger's own fork, kept verbatim) is marked, and only marked events are
    // exempt from the one-successor rule: every event that links still has at most one
    // successor, and an append always links.
    r#"
ALTER TABLE events ADD COLUMN accepted_break BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE events DROP CONSTRAINT events_prev_hash_key;
CREATE UNIQUE INDEX events_prev_hash_key ON events (prev_hash) WHERE NOT accepted_break;
"#,
    // 3: embedding vectors, stored once and shared by every host (they are expensive to
    // make): per model, as each host's cache keeps them (half floats), numbered by `seq` in
    // the order they were committed (every insert holds the head lock), so that a cache
    // catches up by seq. Erasure takes an event's vectors along.
    r#"
CREATE TABLE pmm_embed_models (
    name TEXT PRIMARY KEY,
    dim INTEGER NOT NULL CHECK (dim > 0)
);
CREATE TABLE pmm_vectors (
    seq BIGSERIAL UNIQUE,
    model TEXT NOT NULL REFERENCES pmm_embed_models (name),
    id BIGINT NOT NULL REFERENCES events (id),
    q BYTEA NOT NULL,
    PRIMARY KEY (model, id)
);
CREATE OR REPLACE FUNCTION pmm_erase_text(target BIGINT) RETURNS BOOLEAN
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM set_config('pmm.erasing', 'on', true);
    UPDATE events SET content = ''::bytea, meta = '{}' WHERE id = target;
    IF NOT FOUND THEN
        PERFORM set_config('pmm.erasing', 'off', true);
        RETURN false;
    END IF;
    DELETE FROM pmm_vectors WHERE id = target;
    INSERT INTO pmm_erasures (event_id) VALUES (target);
    PERFORM set_config('pmm.erasing', 'off', true);
    RETURN true;
END
$$;
REVOKE ALL ON FUNCTION pmm_erase_text(BIGINT) FROM PUBLIC;
"#,
];

/// The advisory lock the first writers take while they create or migrate the schema.
const SCHEMA_LOCK: i64 = 0x706d_6d5f_7363_6865; // "pmm_sche"

/// How long a program whose connection the server closed tries to connect again before it
/// gives up (`PgLog::revive`): a restart takes seconds, a failover tens of them.
pub const RECONNECT_FOR: Duration = Duration::from_secs(60);

/// How long a session may sit idle inside a transaction before the server ends it (and frees
/// the head lock): pmm never waits on anything but the database inside one. A shorter
/// `idle_in_transaction_session_timeout` that the server, the database or the role sets is
/// kept ([`PgLog::idle_timeout`]).
pub const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(30);

/// TCP keepalives: a host that vanished is noticed after about idle + interval × retries.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// See [`KEEPALIVE_IDLE`].
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// See [`KEEPALIVE_IDLE`].
pub const KEEPALIVE_RETRIES: u32 = 3;

const COLUMNS: &str = "id, ts, kind, content, meta, prev_hash, hash";

/// A PostgreSQL error, with the ledger's URL (password left out): the store's error
/// ([`Error::Store`], exit status 2).
#[derive(Debug, thiserror::Error)]
#[error("{url}: {what}")]
pub struct PgError {
    url: String,
    what: String,
}

impl crate::error::DatabaseError for PgError {
    fn backend(&self) -> &'static str {
        "postgres"
    }
}

/// What a server error says, with its detail and hint.
fn explain(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("{} ({})", db.message(), db.code().code());
            if let Some(d) = db.detail() {
                s.push_str(&format!(": {d}"));
            }
            if let Some(h) = db.hint() {
                s.push_str(&format!(" (hint: {h})"));
            }
            s
        }
        None => {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(inner) = src {
                s.push_str(&format!(": {inner}"));
                src = inner.source();
            }
            s
        }
    }
}

/// A connection to a ledger in PostgreSQL.
pub struct PgLog {
    client: RefCell<Client>,
    ctx: Ctx,
    /// The isolation level of the head lock's transaction ([`PgLog::lock_head`]).
    isolation: IsolationLevel,
    /// Head locks taken again so far (serialization failures, deadlocks).
    retries: u64,
    /// Catch-up reads of events so far ([`PgLog::events_after`]): what the head lock's
    /// prefetch spares shows here.
    reads_after: std::cell::Cell<u64>,
    /// Events the server linked itself so far ([`PgLog::append_at_head`]).
    linked_here: u64,
    /// Whether this connection has the statements of [`PgLog::append_at_head`].
    at_head: locked::AtHead,
    /// The cache's `COPY` of its new events, prepared once per connection ([`PgLog::push`]).
    copy: Option<postgres::Statement>,
    /// The URL as given (never shown: it may hold a password) and whether the session is
    /// read-only, to connect again when the server closed the connection ([`PgLog::revive`]).
    given: String,
    read_only: bool,
    /// The session's `idle_in_transaction_session_timeout` ([`PgLog::idle_timeout`]).
    idle: Duration,
}

impl PgLog {
    /// Connects to the ledger at `url` for writing, creating or migrating its schema when it
    /// is missing or older (the first writer does; concurrent first writers wait for each
    /// other). `busy_ms` bounds how long an append waits for the head lock, retries included.
    pub fn open_writer(url: &str, busy_ms: u64) -> Result<PgLog> {
        let log = PgLog::connect(url, busy_ms, false)?;
        log.migrate()?;
        Ok(log)
    }

    /// Connects to an existing ledger read-only (the session's transactions are read-only;
    /// nothing is ever created).
    pub fn open_reader(url: &str) -> Result<PgLog> {
        let log = PgLog::connect(url, super::DEFAULT_BUSY_TIMEOUT_MS, true)?;
        let version = log.schema_version()?;
        match version {
            None => Err(log.fail(
                "no pmm ledger in this database (readers never create one; a writer such as pmm-append does)",
            )),
            Some(v) if v as usize > MIGRATIONS.len() => Err(log.newer(v)),
            Some(_) => Ok(log),
        }
    }

    fn connect(url: &str, busy_ms: u64, read_only: bool) -> Result<PgLog> {
        let target = url::parse(url, &url::Env::process())
            .map_err(|m| Error::bad_input(Some("--db".into()), m))?;
        let shown = target.shown.clone();
        let mut config = target.config.clone();
        config
            .keepalives(true)
            .keepalives_idle(KEEPALIVE_IDLE)
            .keepalives_interval(KEEPALIVE_INTERVAL)
            .keepalives_retries(KEEPALIVE_RETRIES);
        if config.get_application_name().is_none() {
            config.application_name("pmm");
        }
        let fail = |what: String| {
            Error::store(PgError {
                url: shown.clone(),
                what,
            })
        };
        let connector = tls::connector(&target).map_err(&fail)?;
        let client = match connector {
            None => config.connect(NoTls),
            Some(c) => config.connect(c),
        }
        .map_err(|e| fail(format!("cannot connect: {}", explain(&e))))?;
        let mut log = PgLog {
            client: RefCell::new(client),
            ctx: Ctx { shown, busy_ms },
            isolation: IsolationLevel::ReadCommitted,
            retries: 0,
            reads_after: Default::default(),
            linked_here: 0,
            at_head: Default::default(),
            copy: None,
            given: url.to_string(),
            read_only,
            idle: IDLE_IN_TRANSACTION,
        };
        // The server's side of the keepalives too (per session, ignored on a Unix socket): a
        // client host that vanished while holding the head lock is noticed after about
        // idle + interval × count, its transaction rolled back and the lock freed.
        // The idle timeout is pmm's, unless the server, the database or the role already sets
        // a shorter one (an operator's stricter rule is kept, never loosened); the session's
        // value comes back, for the pushes of a long write to keep within it.
        let idle_ms = IDLE_IN_TRANSACTION.as_millis();
        let mut session = format!(
            "SELECT ms, pg_catalog.set_config('idle_in_transaction_session_timeout', ms::text, false) FROM \
             (SELECT CASE WHEN setting::bigint BETWEEN 1 AND {idle_ms} THEN setting::bigint ELSE {idle_ms} END AS ms \
              FROM pg_catalog.pg_settings WHERE name = 'idle_in_transaction_session_timeout') AS s; \
             SET lock_timeout = {}; \
             SET tcp_keepalives_idle = {}; SET tcp_keepalives_interval = {}; SET tcp_keepalives_count = {};",
            busy_ms.clamp(1, i32::MAX as u64),
            KEEPALIVE_IDLE.as_secs(),
            KEEPALIVE_INTERVAL.as_secs(),
            KEEPALIVE_RETRIES
        );
        if read_only {
            session.push_str(" SET default_transaction_read_only = on;");
        }
        let replies = log
            .client
            .borrow_mut()
            .simple_query(&session)
            .map_err(|e| log.err(e))?;
        let idle = replies.iter().find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => r.get(0)?.parse::<u64>().ok(),
            _ => None,
        });
        log.idle = idle.map_or(IDLE_IN_TRANSACTION, Duration::from_millis);
        Ok(log)
    }

    /// The ledger's URL, its password left out.
    pub fn url(&self) -> &str {
        &self.ctx.shown
    }

    /// How long the server lets this session sit idle inside a transaction before it ends it
    /// ([`IDLE_IN_TRANSACTION`], or the shorter one the server, database or role set): a
    /// write whose local work is longer pushes to the server within it.
    pub fn idle_timeout(&self) -> Duration {
        self.idle
    }

    /// How many times the head lock (`PgLog::lock_head`) was taken again after a
    /// serialization failure or deadlock.
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// How many times a catch-up read events of its own (outside the head lock's round trip).
    pub fn reads_after(&self) -> u64 {
        self.reads_after.get()
    }

    /// How many events the server linked itself (`PgLog::append_at_head`).
    pub fn linked_here(&self) -> u64 {
        self.linked_here
    }

    /// Runs `sql` on this connection as it is (tests and tools: a role, a grant).
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        self.client
            .borrow_mut()
            .batch_execute(sql)
            .map_err(|e| self.err(e))
    }

    fn fail(&self, what: impl Into<String>) -> Error {
        self.ctx.fail(what)
    }

    fn newer(&self, v: i32) -> Error {
        self.fail(format!(
            "the ledger's schema is version {v}, newer than this pmm knows ({}): upgrade pmm",
            MIGRATIONS.len()
        ))
    }

    fn err(&self, e: postgres::Error) -> Error {
        self.ctx.err(e)
    }

    fn schema_version(&self) -> Result<Option<i32>> {
        let mut c = self.client.borrow_mut();
        let exists: bool = c
            .query_one("SELECT to_regclass('pmm_schema') IS NOT NULL", &[])
            .map_err(|e| self.err(e))?
            .get(0);
        if !exists {
            return Ok(None);
        }
        let row = c
            .query_opt("SELECT version FROM pmm_schema", &[])
            .map_err(|e| self.err(e))?;
        Ok(Some(row.map_or(0, |r| r.get(0))))
    }

    fn migrate(&self) -> Result<()> {
        match self.schema_version()? {
            Some(v) if v as usize == MIGRATIONS.len() => return Ok(()),
            Some(v) if v as usize > MIGRATIONS.len() => return Err(self.newer(v)),
            _ => {}
        }
        let mut c = self.client.borrow_mut();
        let mut tx = c.transaction().map_err(|e| self.err(e))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .map_err(|e| self.err(e))?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS pmm_schema (
                one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
                version INTEGER NOT NULL
            );",
        )
        .map_err(|e| self.err(e))?;
        let from: i32 = tx
            .query_opt("SELECT version FROM pmm_schema", &[])
            .map_err(|e| self.err(e))?
            .map_or(0, |r| r.get(0));
        if from as usize > MIGRATIONS.len() {
            return Err(self.newer(from));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
            tx.batch_execute(sql)
                .map_err(|e| self.fail(format!("migration {}: {}", i + 1, explain(&e))))?;
        }
        tx.execute(
            "INSERT INTO pmm_schema (one, version) VALUES (TRUE, $1)
             ON CONFLICT (one) DO UPDATE SET version = EXCLUDED.version",
            &[&(MIGRATIONS.len() as i32)],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }
}

/// The ledger's URL and busy timeout, for errors.
struct Ctx {
    shown: String,
    busy_ms: u64,
}

impl Ctx {
    fn fail(&self, what: impl Into<String>) -> Error {
        Error::store(PgError {
            url: self.shown.clone(),
            what: what.into(),
        })
    }

    /// Maps a server error: a lock wait past the busy timeout is [`Error::Busy`].
    fn err(&self, e: postgres::Error) -> Error {
        if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
            return Error::Busy(self.busy_ms);
        }
        self.fail(explain(&e))
    }
}

/// Whether a failed head lock should be taken again: serialization failures (a session forced
/// to a stricter isolation level than READ COMMITTED) and deadlocks.
fn retryable(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE
            || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// A little jitter without a random-number crate: the clock's nanoseconds, mixed.
fn jitter(max_ms: u64) -> Duration {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    let mut x = n ^ (std::process::id() as u64) << 32 ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    Duration::from_millis(x % max_ms.max(1))
}

fn row_to_event(r: &Row) -> Event {
    let content: Vec<u8> = r.get(3);
    let content = String::from_utf8(content)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    let kind: String = r.get(2);
    Event {
        id: r.get(0),
        ts: r.get(1),
        kind: kind.into(),
        content,
        meta: r.get(4),
        prev_hash: r.get(5),
        hash: r.get(6),
    }
}

/// The rows a scan reads per query (keyset pages: memory stays flat, and no cursor is held
/// open across the caller's work).
const PAGE: i64 = 512;

fn q_head<C: GenericClient>(c: &mut C) -> std::result::Result<Option<Head>, postgres::Error> {
    Ok(
        c.query_opt("SELECT id, hash FROM events ORDER BY id DESC LIMIT 1", &[])?
            .map(|r| Head {
                id: r.get(0),
                hash: r.get(1),
            }),
    )
}

fn q_get<C: GenericClient>(
    c: &mut C,
    id: i64,
) -> std::result::Result<Option<Event>, postgres::Error> {
    Ok(c.query_opt(
        &format!("SELECT {COLUMNS} FROM events WHERE id = $1"),
        &[&id],
    )?
    .map(|r| row_to_event(&r)))
}

/// `filter`'s condition on ids `$1..=$2` and kinds `$3`.
fn where_clause(filter: &Filter) -> &'static str {
    if filter.kinds.is_empty() {
        "id >= $1 AND id <= $2"
    } else {
        "id >= $1 AND id <= $2 AND kind = ANY($3)"
    }
}

fn q_page<C: GenericClient>(
    c: &mut C,
    filter: &Filter,
    from: i64,
    until: i64,
    limit: i64,
    desc: bool,
) -> std::result::Result<Vec<Event>, postgres::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM events WHERE {} ORDER BY id {} LIMIT {limit}",
        where_clause(filter),
        if desc { "DESC" } else { "ASC" }
    );
    let rows = if filter.kinds.is_empty() {
        c.query(&sql, &[&from, &until])?
    } else {
        let kinds: Vec<&str> = filter.kinds.iter().map(Kind::as_str).collect();
        c.query(&sql, &[&from, &until, &kinds])?
    };
    Ok(rows.iter().map(row_to_event).collect())
}

/// A scan in pages fetched by `fetch(from, until)`: the connection is not borrowed while
/// `each` runs, so that `each` may read the log too.
fn scan_pages(
    filter: &Filter,
    each: &mut dyn FnMut(Event) -> Result<bool>,
    fetch: &mut dyn FnMut(i64, i64) -> Result<Vec<Event>>,
) -> Result<()> {
    let until = filter.until.unwrap_or(i64::MAX);
    let mut from = filter.since.unwrap_or(i64::MIN);
    loop {
        let page = fetch(from, until)?;
        let full = page.len() as i64 == PAGE;
        for ev in page {
            let next = ev.id.checked_add(1);
            if !each(ev)? {
                return Ok(());
            }
            match next {
                Some(n) => from = n,
                None => return Ok(()),
            }
        }
        if !full {
            return Ok(());
        }
    }
}

fn q_tail<C: GenericClient>(
    c: &mut C,
    filter: &Filter,
    n: usize,
) -> std::result::Result<Vec<Event>, postgres::Error> {
    let mut out = q_page(
        c,
        filter,
        filter.since.unwrap_or(i64::MIN),
        filter.until.unwrap_or(i64::MAX),
        n.min(i64::MAX as usize) as i64,
        true,
    )?;
    out.reverse();
    Ok(out)
}

fn q_count<C: GenericClient>(
    c: &mut C,
    kind: &Kind,
    after: i64,
) -> std::result::Result<u64, postgres::Error> {
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM events WHERE kind = $1 AND id > $2",
            &[&kind.as_str(), &after],
        )?
        .get(0);
    Ok(n.max(0) as u64)
}

fn q_id_of_hash<C: GenericClient>(
    c: &mut C,
    hash: &str,
) -> std::result::Result<Option<i64>, postgres::Error> {
    Ok(
        c.query_opt("SELECT id FROM events WHERE hash = $1", &[&hash])?
            .map(|r| r.get(0)),
    )
}

/// The reads of the server's rows (a check that must see them, not a host's cache of them).
impl EventLog for PgLog {
    fn head(&self) -> Result<Option<Head>> {
        q_head(&mut *self.client.borrow_mut()).map_err(|e| self.err(e))
    }
    fn get(&self, id: i64) -> Result<Option<Event>> {
        q_get(&mut *self.client.borrow_mut(), id).map_err(|e| self.err(e))
    }
    fn scan(&self, filter: &Filter, each: &mut dyn FnMut(Event) -> Result<bool>) -> Result<()> {
        scan_pages(filter, each, &mut |from, until| {
            let page = q_page(
                &mut *self.client.borrow_mut(),
                filter,
                from,
                until,
                PAGE,
                false,
            );
            page.map_err(|e| self.err(e))
        })
    }
    fn tail(&self, filter: &Filter, n: usize) -> Result<Vec<Event>> {
        q_tail(&mut *self.client.borrow_mut(), filter, n).map_err(|e| self.err(e))
    }
    fn count_kind_after(&self, kind: Kind, after: i64) -> Result<u64> {
        q_count(&mut *self.client.borrow_mut(), &kind, after).map_err(|e| self.err(e))
    }
    fn id_of_hash(&self, hash: &str) -> Result<Option<i64>> {
        q_id_of_hash(&mut *self.client.borrow_mut(), hash).map_err(|e| self.err(e))
    }
}

#[cfg(test)]
impl PgLog {
    /// Runs this connection's head-lock transactions ([`PgLog::lock_head`]) at `level` instead
    /// of READ COMMITTED: what a pooler or a server policy that forces a stricter level does.
    /// Appends stay correct (the lock is taken again on a serialization failure).
    pub fn force_isolation(&mut self, level: IsolationLevel) {
        self.isolation = level;
    }
}

#[cfg(test)]
pub(crate) mod tests;
