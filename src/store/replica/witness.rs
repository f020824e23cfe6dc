//! What this host has verified of a PostgreSQL ledger: the newest head (id and hash) it caught
//! up to, written down in a small file beside the cache (`pg-….head`), outside the cache so
//! that it outlives a cache deleted or set aside. A server whose event at that id has another
//! hash has rewritten history (`history_rewritten`); one whose events end below it was rolled
//! back (`rolled_back`). Either is refused (exit 1), and the cache that holds the history this
//! host saw is kept aside as evidence, renamed, never deleted, until an operator says the
//! server was restored on purpose ([`accept_restored`], `pmm-verify --accept-restored-server`).

use super::files;
use crate::error::ExitStatus;
use crate::store::log::EventLog;
use crate::store::postgres::PgLog;
use crate::store::Head;
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// How often a writer writes its newest verified head down while it keeps appending: once a
/// second, and at its end (a stream of appends renamed a file per event, which cost as much
/// as the server's commit). The file is never synced, so after a crash it could always be
/// older than the cache; the cache's own head is checked at every open beside it.
const RECORD_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The head this host verified, and the file that keeps it.
pub(crate) struct Witness {
    file: PathBuf,
    head: Option<Head>,
    /// A verified head not written down yet ([`RECORD_EVERY`]), and when the file was last
    /// written.
    pending: Option<Head>,
    written: Option<std::time::Instant>,
}

/// The file beside `cache` that keeps what this host verified.
fn witness_file(cache: &Path) -> PathBuf {
    cache.with_extension("head")
}

/// The head written in `file` (`ID HASH`, `-` for an event without a hash), or none: no file,
/// or one a crash left empty or cut (then the cache's own head is what is checked).
fn read_head(file: &Path) -> Result<Option<Head>> {
    let md = match std::fs::symlink_metadata(file) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(file, e)),
    };
    files::owned(file, &md)?;
    let text = std::fs::read_to_string(file).map_err(|e| Error::io(file, e))?;
    let mut words = text.split_whitespace();
    let (Some(id), Some(hash), None) = (words.next(), words.next(), words.next()) else {
        return Ok(None);
    };
    let Ok(id) = id.parse::<i64>() else {
        return Ok(None);
    };
    let hash = (hash != "-").then(|| hash.to_string());
    Ok((id > 0).then_some(Head { id, hash }))
}

impl Witness {
    /// What this host verified of the ledger whose cache is `cache`.
    pub(crate) fn load(cache: &Path) -> Result<Witness> {
        let file = witness_file(cache);
        let head = read_head(&file)?;
        Ok(Witness {
            file,
            head,
            pending: None,
            written: None,
        })
    }

    /// The newest head this host verified, as last read or written.
    pub(crate) fn head(&self) -> Option<&Head> {
        self.head.as_ref()
    }

    /// Writes `head` down when it is newer than the head on file. Called with the cache's
    /// write lock held, so that two processes of this host write one after the other. A
    /// head that cannot be written is a warning: the server and the cache are right, only
    /// this host's record of them is older.
    ///
    /// Within [`RECORD_EVERY`] of the last write, `head` waits for the next one, or the end.
    pub(crate) fn record(&mut self, head: Option<&Head>) {
        let Some(head) = head else {
            return;
        };
        if self.written.is_some_and(|t| t.elapsed() < RECORD_EVERY) {
            self.pending = Some(head.clone());
            return;
        }
        self.pending = None;
        self.written = Some(std::time::Instant::now());
        self.write(head);
    }

    /// Writes `head` down when it is newer than the head on file.
    fn write(&mut self, head: &Head) {
        let on_file = read_head(&self.file).ok().flatten();
        if on_file.as_ref().is_some_and(|h| h.id >= head.id) {
            self.head = on_file;
            return;
        }
        let text = format!("{} {}\n", head.id, head.hash.as_deref().unwrap_or("-"));
        match files::replace(&self.file, &text) {
            Ok(()) => self.head = Some(head.clone()),
            Err(e) => crate::store::notices::push(format!(
                "{}: the head this host verified (event {}) could not be written down ({e}); this host checks the server against an older one until it can",
                self.file.display(),
                head.id
            )),
        }
    }
}

impl Drop for Witness {
    /// The newest head verified since the last write ([`RECORD_EVERY`]) is written down at
    /// the end. Without the cache's lock now: a newer head another process wrote meanwhile
    /// may be overwritten by this older one, which is still one this host verified (a weaker
    /// check for a while, never a false alarm).
    fn drop(&mut self) {
        if let Some(head) = self.pending.take() {
            self.write(&head);
        }
    }
}

/// How a server no longer holds a head this host verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Divergence {
    /// The server's event at the verified id has another hash: history was rewritten.
    Rewritten {
        /// The verified event.
        id: i64,
        /// The hash this host verified there.
        verified: Option<String>,
        /// The hash the server has there.
        found: Option<String>,
    },
    /// The server's events end before the verified id: it was rolled back (a restored
    /// backup, a database made again, rows deleted).
    RolledBack {
        /// The verified event.
        id: i64,
        /// The hash this host verified there.
        verified: Option<String>,
        /// The server's last event (0: none).
        server_head: i64,
    },
}

impl Divergence {
    /// The finding's name: `history_rewritten` or `rolled_back`.
    pub fn finding(&self) -> &'static str {
        match self {
            Divergence::Rewritten { .. } => "history_rewritten",
            Divergence::RolledBack { .. } => "rolled_back",
        }
    }
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = |h: &Option<String>| h.clone().unwrap_or_else(|| "none".into());
        match self {
            Divergence::Rewritten {
                id,
                verified,
                found,
            } => write!(
                f,
                "history_rewritten: the server's event {id} has hash {}, but this host verified {} there",
                h(found),
                h(verified)
            ),
            Divergence::RolledBack {
                id,
                verified,
                server_head,
            } => write!(
                f,
                "rolled_back: the server's events end at {server_head}, but this host verified event {id} ({})",
                h(verified)
            ),
        }
    }
}

/// Whether the server behind `log` still holds `verified`.
pub(crate) fn judge(verified: &Head, log: &PgLog) -> Result<Option<Divergence>> {
    match log.hash_at(verified.id)? {
        Some(found) if found == verified.hash => Ok(None),
        Some(found) => Ok(Some(Divergence::Rewritten {
            id: verified.id,
            verified: verified.hash.clone(),
            found,
        })),
        None => Ok(Some(Divergence::RolledBack {
            id: verified.id,
            verified: verified.hash.clone(),
            server_head: log.head()?.map_or(0, |h| h.id),
        })),
    }
}

/// A server refused because it no longer holds what this host verified. Exit status 1: a
/// finding, as `pmm-verify` reports it.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {divergence}; this host refuses the server: nothing was read from it or written to it{}. If the server was restored from a backup on purpose, run pmm-verify --db URL --accept-restored-server on this host (docs/scale-out.md)", .evidence.as_ref().map(|p| format!("; the cache holding what this host saw is kept at {}", p.display())).unwrap_or_default())]
pub struct Refused {
    url: String,
    /// How the server diverged.
    pub divergence: Divergence,
    evidence: Option<PathBuf>,
}

impl ExitStatus for Refused {
    fn exit_code(&self) -> u8 {
        1
    }
}

/// The error for a server that diverged from what this host verified.
pub(crate) fn refused(url: &str, divergence: Divergence, evidence: Option<PathBuf>) -> Error {
    Error::with_exit_status(Refused {
        url: url.to_string(),
        divergence,
        evidence,
    })
}

/// Renames `cache` (with its `-wal` and `-shm`) to `pg-….LABEL-SECONDS.db` beside it: kept,
/// never deleted. Where it went, or none when there was no cache (or only the empty file made
/// for one, which holds nothing to keep).
pub(crate) fn set_aside(cache: &Path, label: &str) -> Result<Option<PathBuf>> {
    let empty = std::fs::metadata(cache).map_or(true, |m| m.len() == 0)
        && !files::with_suffix(cache, "-wal").exists();
    if empty {
        return Ok(None);
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let stem = cache.with_extension("");
    let mut aside = files::with_suffix(&stem, &format!(".{label}-{secs}.db"));
    if aside.exists() {
        aside = files::with_suffix(&stem, &format!(".{label}-{secs}-{}.db", std::process::id()));
    }
    for suffix in files::SUFFIXES {
        let from = files::with_suffix(cache, suffix);
        if suffix.is_empty() || from.exists() {
            std::fs::rename(&from, files::with_suffix(&aside, suffix))
                .map_err(|e| Error::io(&from, e))?;
        }
    }
    Ok(Some(aside))
}

/// Accepts the server at `url` as restored on purpose (`pmm-verify --accept-restored-server`,
/// once its chain verified): this host's cache is set aside (kept), `head`, the server's
/// head as verified, becomes what this host verified, and a line saying so is added to the
/// log beside the cache (`pg-….log`). The line, for the caller to show.
pub fn accept_restored(url: &str, head: Option<&Head>) -> Result<String> {
    let cache = super::cache_file(url)?;
    files::prepare_dir(&cache)?;
    let before = read_head(&witness_file(&cache))?;
    let aside = set_aside(&cache, "replaced")?;
    let file = witness_file(&cache);
    match head {
        Some(h) => {
            let text = format!("{} {}\n", h.id, h.hash.as_deref().unwrap_or("-"));
            files::replace(&file, &text).map_err(|e| Error::io(&file, e))?;
        }
        None => match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(&file, e)),
            _ => {}
        },
    }
    let show = |h: Option<&Head>| {
        h.map_or("no event".into(), |h| {
            format!("event {} ({})", h.id, h.hash.as_deref().unwrap_or("none"))
        })
    };
    let line = format!(
        "{} accepted {} as restored on purpose: this host had verified {}, the server's head is {}; {}",
        chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ"),
        crate::store::postgres::url::shown(url),
        show(before.as_ref()),
        show(head),
        aside.map_or("there was no cache".into(), |p| format!("the old cache is kept at {}", p.display()))
    );
    let log = cache.with_extension("log");
    append_line(&log, &line).map_err(|e| Error::io(&log, e))?;
    Ok(line)
}

/// Adds `line` to the log file `path` (mode `0600`).
fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{line}")
}
