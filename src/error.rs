//! The library's typed errors. Each variant carries the evidence a user needs (line, event id,
//! path) and knows which exit status it maps to (SPEC §3).

use crate::event::Kind;
use std::path::PathBuf;

/// Result with the library [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong below the command layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Input that is not what it should be: a bad JSONL line, an unknown kind, NaN, ...
    /// `at` is `<source>:<line>` when the input has lines.
    #[error("{}{msg}", at.as_ref().map(|a| format!("{a}: ")).unwrap_or_default())]
    BadInput {
        /// Where the bad input is, `<file>:<line>` or `<file>`.
        at: Option<String>,
        /// What is wrong with it.
        msg: String,
    },
    /// A line of input that is not UTF-8; `at` is `<source>:<line>`.
    #[error("{at}: not UTF-8")]
    NotUtf8 {
        /// Where the line is.
        at: String,
    },
    /// An output file that would overwrite the ledger or one of its companion files.
    #[error("{}: refusing to write over {what} of the ledger {} (choose another output file)", target.display(), ledger.display())]
    WouldOverwriteLedger {
        /// The output file asked for.
        target: PathBuf,
        /// Which file of the ledger it is (`the file`, `the -wal file of`, …).
        what: String,
        /// The ledger.
        ledger: PathBuf,
    },
    /// An output file that is a directory.
    #[error("{}: is a directory (an output file must be a file)", .0.display())]
    OutputIsDirectory(PathBuf),
    /// A reader's full-text index lags too far behind the ledger to be caught up on the fly.
    #[error("the full-text index is {lag} events behind the ledger (readers index at most {max_unindexed} on the fly): run `pmm-recall --reindex`, or any writer, on it first")]
    IndexBehind {
        /// Events not indexed.
        lag: u64,
        /// The most a reader indexes on the fly.
        max_unindexed: u64,
    },
    /// A ledger a reader asked for does not exist (readers never create files).
    #[error("{}: no such ledger (readers never create one; check --db or $PMM_DB)", .0.display())]
    MissingLedger(PathBuf),
    /// A ledger named by something that is not a file path: a URL, an SQLite URI (`file:…`),
    /// an empty name. Nothing was opened or created.
    #[error("{why}")]
    NotAPath {
        /// The name given.
        path: PathBuf,
        /// What it is instead, and how to name a file.
        why: String,
    },
    /// A writer was pointed at a file it may not write.
    #[error("{}: ledger is read-only", .0.display())]
    ReadOnlyLedger(PathBuf),
    /// A reader that cannot read a ledger where it is without leaving files beside it that
    /// would lock its owner's writers out (or without being able to make them at all).
    #[error("{}: cannot read the ledger here: {why}", path.display())]
    CannotRead {
        /// The ledger.
        path: PathBuf,
        /// Why, and what to do.
        why: String,
    },
    /// Another process held the write lock longer than the busy timeout.
    #[error("database is locked: another process held it longer than the busy timeout ({0} ms)")]
    Busy(u64),
    /// A file is not a ledger (not SQLite, or SQLite without an `events` table).
    #[error("{}: not a pmm ledger: {why}", path.display())]
    NotALedger {
        /// The file.
        path: PathBuf,
        /// Why it was rejected.
        why: String,
    },
    /// The write policy refused a write; a `violation` event was appended (exit 1).
    #[error("policy forbids actor '{actor}' writing '{kind}'{}{}; violation recorded as event {violation_id}", if *.unreadable { " (the policy could not be read: fail closed)" } else { "" }, .reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default())]
    PolicyViolation {
        /// `meta.source` of the refused event, or `unknown`.
        actor: String,
        /// The refused kind.
        kind: String,
        /// Id of the `violation` event that records the refusal.
        violation_id: i64,
        /// True when the refusal is fail-closed because the policy is unreadable.
        unreadable: bool,
        /// Set when the write was refused for its content: a `config` value out of range.
        reason: Option<String>,
    },
    /// An import source that cannot be taken as it is.
    #[error("import refused: {0}")]
    ImportRefused(String),
    /// The write policy refused an event inside a multi-event write (a turn, a tick) that was
    /// therefore rolled back; the program records the `violation` (turning this into
    /// [`Error::PolicyViolation`]) once the transaction is gone.
    #[error("policy forbids actor '{}' writing '{}'; nothing of this write was committed", .0.actor, .0.kind)]
    Refused(Box<Violation>),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The tool worked and what was asked for is not there (a cid without a thread, an event
    /// that is not a graph node): a negative answer, exit 1.
    #[error("{0}")]
    NotFound(String),
    /// A ledger whose SQLite file is damaged in a way that would make a write unsafe (its
    /// head is below ids it has already written: appending would reuse them).
    #[error("{}: ledger is damaged: {why}; nothing was written (check it with pmm-verify --integrity, restore from a backup)", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Any other error of the store's database (SQLite or PostgreSQL), the backend's own error
    /// boxed inside ([`StoreError`]): nothing above the store matches on a driver's type.
    #[error(transparent)]
    Store(StoreError),
    /// An error of a module above this one (a model call, a turn) with the exit status that
    /// module gave it ([`ExitStatus`]): the runner reads every status from this one type.
    #[error(transparent)]
    Exit(Coded),
}

/// A module's error and its exit status, fixed when it became an [`Error`]. It reads as the
/// module's error (the same text, the same sources).
#[derive(Debug)]
pub struct Coded {
    code: u8,
    error: Box<dyn std::error::Error + Send + Sync>,
}

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl Coded {
    /// The module's error, if it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.error.downcast_ref::<T>()
    }
}

impl std::error::Error for Coded {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// A backend's database error as the store hands it up (sqlx-core's `DatabaseError`): the
/// text a user reads and the chain of causes are the backend's own.
pub trait DatabaseError: std::error::Error + Send + Sync + 'static {
    /// Which backend said it (`sqlite`, `postgres`).
    fn backend(&self) -> &'static str;
}

/// A backend's database error, boxed ([`Error::Store`]): it reads as the backend's error (the
/// same text, the same sources), whichever backend it came from.
#[derive(Debug)]
pub struct StoreError(Box<dyn DatabaseError>);

impl StoreError {
    /// Which backend said it.
    pub fn backend(&self) -> &'static str {
        self.0.backend()
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The process exit status an error maps to (SPEC §3): each library error type says its own,
/// so the program's runner asks the error instead of knowing every module's types.
pub trait ExitStatus {
    /// 1 for a negative answer, 2 for usage, input, I/O and database errors, 3 when an
    /// external service failed, 128 + the signal when a call was interrupted.
    fn exit_code(&self) -> u8;
}

impl Error {
    /// Shorthand for a [`Error::BadInput`]; `msg` is a text or a module's typed error.
    pub fn bad_input(at: impl Into<Option<String>>, msg: impl std::fmt::Display) -> Self {
        Error::BadInput {
            at: at.into(),
            msg: msg.to_string(),
        }
    }

    /// A module's error as an [`Error`] that keeps the module's exit status.
    pub fn with_exit_status<E>(e: E) -> Self
    where
        E: ExitStatus + std::error::Error + Send + Sync + 'static,
    {
        Error::Exit(Coded {
            code: e.exit_code(),
            error: Box::new(e),
        })
    }

    /// A backend's database error as the store's ([`Error::Store`], exit status 2).
    pub fn store(e: impl DatabaseError) -> Self {
        Error::Store(StoreError(Box::new(e)))
    }

    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

impl ExitStatus for Error {
    /// 1 for a negative answer (policy refusal, nothing found), the module's own status for
    /// [`Error::Exit`], 2 for everything else.
    fn exit_code(&self) -> u8 {
        match self {
            Error::PolicyViolation { .. } | Error::NotFound(_) => 1,
            Error::Exit(c) => c.code,
            _ => 2,
        }
    }
}

/// A write the policy refused: who tried to write what, and whether the policy was unreadable.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The actor (`meta.source` or `unknown`).
    pub actor: String,
    /// The kind it tried to write.
    pub kind: Kind,
    /// Set when the refusal is fail-closed: the policy could not be read (event id, why).
    pub unreadable: Option<(i64, String)>,
    /// Set when the content was refused whoever wrote it: a `config` value out of the range
    /// the runtime accepts (see [`crate::event::config`]).
    pub reason: Option<String>,
}

impl Violation {
    pub(crate) fn into_error(self, violation_id: i64) -> Error {
        Error::PolicyViolation {
            actor: self.actor,
            kind: self.kind.to_string(),
            violation_id,
            unreadable: self.unreadable.is_some(),
            reason: self.reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_variants_read_as_the_bad_input_they_replace() {
        assert_eq!(
            Error::NotUtf8 {
                at: "<stdin>:3".into()
            }
            .to_string(),
            Error::bad_input(Some("<stdin>:3".into()), "not UTF-8").to_string()
        );
        assert_eq!(
            Error::OutputIsDirectory("out".into()).to_string(),
            "out: is a directory (an output file must be a file)"
        );
        assert_eq!(
            Error::WouldOverwriteLedger {
                target: "x.db-wal".into(),
                what: "the -wal file".into(),
                ledger: "x.db".into(),
            }
            .to_string(),
            "x.db-wal: refusing to write over the -wal file of the ledger x.db (choose another output file)"
        );
        assert!(Error::IndexBehind {
            lag: 7,
            max_unindexed: 5
        }
        .to_string()
        .starts_with("the full-text index is 7 events behind the ledger (readers index at most 5 on the fly)"));
        for e in [
            Error::NotUtf8 { at: "a:1".into() },
            Error::OutputIsDirectory("out".into()),
            Error::IndexBehind {
                lag: 7,
                max_unindexed: 5,
            },
        ] {
            assert_eq!(e.exit_code(), 2, "{e}");
        }
        assert_eq!(Error::NotFound("x".into()).exit_code(), 1);
    }
}
