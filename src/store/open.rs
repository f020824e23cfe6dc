//! Opening a ledger by its `--db` argument, the one place that tells the backends apart: a
//! PostgreSQL URL opens [`super::replica::Cached`] (the server and this host's cache), any
//! other name a SQLite file ([`super::sqlite`], which refuses what is not a file's path).
//! The `--db` helpers that must know both kinds ([`exists`], [`shown`]) live here too.

use super::ledger::{self, Ledger};
use super::{postgres, sqlite, DEFAULT_BUSY_TIMEOUT_MS};
use crate::Result;
use std::path::Path;

/// `path` as a PostgreSQL URL, when it is one.
fn postgres_url(path: &Path) -> Option<&str> {
    path.to_str().filter(|p| postgres::is_postgres_url(p))
}

/// Whether the ledger `--db` names exists: a file, or a PostgreSQL URL (whose server a writer
/// connects to, creating the schema if need be).
pub fn exists(db: &Path) -> bool {
    postgres_url(db).is_some() || db.exists()
}

/// How to name the ledger `db` in messages and records: its path, or its PostgreSQL URL with
/// the password (in the user part or any `password=` parameter, however encoded) as `***`.
/// Everything that shows a `--db` shows it through this.
pub fn shown(db: &Path) -> String {
    match postgres_url(db) {
        Some(url) => postgres::url::shown(url),
        None => db.display().to_string(),
    }
}

/// The device and inode of the ledger file `db` names (`None` for a PostgreSQL URL or a path
/// that names nothing): a long-lived reader compares it with the one it was opened on, so that
/// a ledger replaced by another file (a restore by `mv`) is not read through the old one.
pub fn file_identity(db: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    if postgres_url(db).is_some() {
        return None;
    }
    std::fs::metadata(db).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether `db` is a PostgreSQL URL (`postgres://`, `postgresql://`).
pub fn is_postgres_url(db: &str) -> bool {
    postgres::is_postgres_url(db)
}

/// Checks a PostgreSQL URL as `--db` takes it (its parameters, its password file), so that a
/// bad one is exit 2 before anything opens: why not, when it is not good.
pub fn check_url(url: &str) -> std::result::Result<(), String> {
    postgres::url::parse(url, &postgres::url::Env::process()).map(drop)
}

/// A PostgreSQL URL with its password (in the user part or any `password=` parameter) as
/// `***`: how every message shows one.
pub fn shown_url(url: &str) -> String {
    postgres::url::shown(url)
}

/// The server of the PostgreSQL ledger at `url`, read-only, its rows as stored there (not
/// this host's cache of them: a verification must see the rows themselves).
pub fn server_reader(url: &str) -> Result<postgres::PgLog> {
    postgres::PgLog::open_reader(url)
}

impl Ledger {
    /// Opens (creating file and folders if needed) a ledger for writing
    /// ([`sqlite::Ledger::open_writer`]); a PostgreSQL URL's server is connected to (its
    /// schema made if need be) and this host's cache caught up.
    pub fn open_writer(path: &Path, busy_ms: u64) -> Result<Ledger> {
        match postgres_url(path) {
            Some(url) => ledger::cached(url, true, busy_ms),
            None => sqlite::Ledger::open_writer(path, busy_ms).map(Ledger::File),
        }
    }

    /// Opens an existing ledger read-only ([`sqlite::Ledger::open_reader`]); a PostgreSQL
    /// URL's session is read-only, and this host's cache caught up.
    pub fn open_reader(path: &Path) -> Result<Ledger> {
        match postgres_url(path) {
            Some(url) => ledger::cached(url, false, DEFAULT_BUSY_TIMEOUT_MS),
            None => sqlite::Ledger::open_reader(path).map(Ledger::File),
        }
    }

    /// Opens a ledger to check its derived tables ([`sqlite::Ledger::open_for_check`]); a
    /// PostgreSQL ledger's cache is this host's own file, whose indexes are checked in place.
    pub fn open_for_check(path: &Path) -> Result<Ledger> {
        match postgres_url(path) {
            Some(url) => ledger::cached(url, false, DEFAULT_BUSY_TIMEOUT_MS),
            None => sqlite::Ledger::open_for_check(path).map(Ledger::File),
        }
    }

    /// Opens another program's ledger file for one look, leaving no trace
    /// ([`sqlite::Ledger::open_untouched`]); a PostgreSQL URL is refused (exit 2): a `REF:`
    /// target a model names is read at rest, never connected to.
    pub fn open_untouched(path: &Path) -> Result<Ledger> {
        postgres::refuse_url(path)?;
        sqlite::Ledger::open_untouched(path).map(Ledger::File)
    }
}

/// A new ledger file built under a temporary name and put at its path whole
/// ([`sqlite::Fresh`]), as the program-facing [`Ledger`]. Never for a PostgreSQL URL.
pub struct Fresh {
    /// The ledger being built (closed before `file` removes an unpublished one).
    ledger: Ledger,
    /// The temporary file and its lock.
    file: sqlite::Fresh,
}

impl Fresh {
    /// [`sqlite::Fresh::start`]; `None` for a PostgreSQL URL too (its server is written to
    /// as any write).
    pub fn start(target: &Path, busy_ms: u64) -> Result<Option<Fresh>> {
        if postgres_url(target).is_some() {
            return Ok(None);
        }
        let Some(mut file) = sqlite::Fresh::start(target, busy_ms)? else {
            return Ok(None);
        };
        let ledger = Ledger::File(file.take_ledger());
        Ok(Some(Fresh { ledger, file }))
    }

    /// The ledger being built.
    pub fn ledger(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    /// [`sqlite::Fresh::publish`].
    pub fn publish(self) -> Result<()> {
        let Fresh { ledger, file } = self;
        match ledger {
            Ledger::File(l) => file.publish_with(l),
            // Never so: `start` makes a file's.
            Ledger::Cached(_) => Err(crate::Error::bad_input(
                None,
                "a new ledger file was expected, not a PostgreSQL ledger",
            )),
        }
    }
}
