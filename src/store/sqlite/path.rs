//! The file-system rules of a ledger's path: what names a file (not a URL, an SQLite URI or
//! nothing; a PostgreSQL URL is told apart above this backend, in `store::open`), the `-wal`
//! and `-shm` companions a reader may or may not make, and the recovery of ones a reader of a
//! read-only ledger left behind.

use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// How a reader opens a ledger ([`read_mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadMode {
    /// As SQLite does: with the `-wal` and `-shm` files, made if they are not there.
    Plain,
    /// `immutable`: the file as it is at rest, nothing made or locked beside it.
    AtRest,
}

/// `path` with `suffix` appended to its file name.
pub(super) fn companion(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Whether this process may write `path` (`access(2)`: root may, unless the file system is
/// read-only).
pub(super) fn file_writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Whether this process may write in `dir`.
pub(super) fn dir_writable(dir: &Path) -> bool {
    file_writable(dir)
}

/// Why this process must not make the `-wal` and `-shm` files of the ledger at `path`, if it
/// must not: they would be its own, and the ledger's owner's writers could not write a `-shm`
/// that another user made, nor, in a sticky directory such as `/tmp`, remove it (SQLite gives
/// the files root makes the ledger's owner); and in a directory this process cannot write
/// they cannot be made at all.
pub(super) fn companions_forbidden(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(path).ok()?.uid();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    // SQLite gives the files root makes the ledger's owner.
    if owner != me && me != 0 {
        return Some(format!(
            "the ledger belongs to user {owner}, whose writers could not use -wal and -shm files that user {me} made"
        ));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir_writable(dir) {
        return Some(format!(
            "user {me} cannot write its directory {}, where SQLite makes the -wal and -shm files",
            dir.display()
        ));
    }
    None
}

/// How a reader opens the WAL ledger at `path` (SQLite's "WAL mode with read-only
/// databases"). A read-only connection needs the `-wal` and `-shm` files and makes them when
/// they are not there, which a reader does only where [`companions_forbidden`] allows it.
/// Elsewhere:
/// - no `-wal`: no writer has the ledger open and all of it is in the file, which is read
///   `immutable` (nothing made, nothing locked; a writer that starts during the read can make
///   it fail, and it is then run again);
/// - a `-wal` and a `-shm`: a writer has it open; SQLite reads through them (the `-shm`
///   read-only if this user cannot write it) and makes nothing;
/// - a `-wal` without a `-shm`: refused, saying why and what to do.
pub(super) fn read_mode(path: &Path) -> Result<ReadMode> {
    let Some(why) = companions_forbidden(path) else {
        return Ok(ReadMode::Plain);
    };
    if !companion(path, "-wal").exists() {
        return Ok(ReadMode::AtRest);
    }
    if companion(path, "-shm").exists() {
        return Ok(ReadMode::Plain);
    }
    Err(Error::CannotRead {
        path: path.into(),
        why: format!(
            "its -wal holds writes not yet in the ledger and there is no -shm beside it, which a reader must make, but {why}: run any pmm writer on it as its owner (the writer folds the -wal into the ledger when it ends), then read again"
        ),
    })
}

/// A reader's failed open beside `-wal` and `-shm` files it may not change, said as such.
pub(super) fn unreadable_companions(e: Error, path: &Path) -> Error {
    let Some(why) = companions_forbidden(path) else {
        return e;
    };
    match e {
        Error::ReadOnlyLedger(_) | Error::Io { .. } => Error::CannotRead {
            path: path.into(),
            why: format!(
                "SQLite could not read it through the -wal and -shm files beside it ({e}), and {why}: run any pmm writer on it as its owner, then read again"
            ),
        },
        e => e,
    }
}

/// Why a ledger's name is not a file path, or `None` when it is one: a URL (`postgres://…`,
/// which a later store will take), an SQLite URI (`file:…`, which SQLite would open as a URI
/// to writers and a path to readers), or nothing at all. A ledger is always named by a plain
/// path; a file whose name starts with `file:` is named `./file:…`.
pub fn not_a_path(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("an empty name is not a file path".into());
    }
    if name.len() >= 5 && name.as_bytes()[..5].eq_ignore_ascii_case(b"file:") {
        return Some(format!(
            "'{name}' is an SQLite URI, not a file path (a ledger is named by its file's path; ./{name} names the file)"
        ));
    }
    let scheme = name.split_once("://").map(|(s, _)| s);
    if scheme.is_some_and(|s| {
        s.starts_with(|c: char| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    }) {
        return Some(format!(
            "'{name}' is a URL, not a file path (a ledger is named by its file's path)"
        ));
    }
    None
}

/// [`not_a_path`] as a typed error: the check every ledger open makes before touching the
/// file system (no folder `file:x` or `postgres:` is ever created).
pub(super) fn check_path(path: &Path) -> Result<()> {
    match not_a_path(&path.to_string_lossy()) {
        Some(why) => Err(Error::NotAPath {
            path: path.into(),
            why,
        }),
        None => Ok(()),
    }
}

/// `--db` (and `$PMM_DB`): a plain file path; a URL, an SQLite URI or nothing is refused
/// (see [`not_a_path`]).
pub fn parse_db(s: &str) -> std::result::Result<PathBuf, String> {
    match not_a_path(s) {
        Some(why) => Err(why),
        None => Ok(PathBuf::from(s)),
    }
}

/// The name SQLite is given for a ledger's path: one it can only take as that file. A
/// relative `file:…` would be a URI and `:memory:` or an empty name a database that is no
/// file at all; `./` in front of a relative path rules all of them out.
pub(super) fn sqlite_path(path: &Path) -> std::borrow::Cow<'_, Path> {
    if path.is_relative() {
        Path::new(".").join(path).into()
    } else {
        path.into()
    }
}

/// A ledger is a regular file: a device (`--db` through a symlink to `/dev/null`), a pipe or
/// a socket is refused before SQLite opens it and creates `/dev/null-journal` beside it.
pub fn not_regular(path: &Path, md: &std::fs::Metadata) -> Error {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    let what = if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_fifo() {
        "a pipe"
    } else if t.is_socket() {
        "a socket"
    } else {
        "something else"
    };
    Error::NotALedger {
        path: path.into(),
        why: format!("not a regular file ({what}); a ledger is a SQLite file"),
    }
}

/// A reader of a read-only ledger leaves `-wal` and `-shm` files with the ledger's read-only
/// mode; once the ledger is writable again they would keep every writer out with "ledger is
/// read-only". Such leftovers get the ledger's mode back (changing a mode is safe while other
/// programs have the files open); when that is not allowed (another user's files), the error
/// says what to do.
pub(super) fn recover_companions(path: &Path, ledger: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for suffix in ["-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let p = PathBuf::from(p);
        let Ok(md) = std::fs::metadata(&p) else {
            continue;
        };
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if md.is_file() && md.uid() != me && !file_writable(&p) {
            return Err(Error::io(
                &p,
                std::io::Error::other(format!(
                    "belongs to user {}, who read the ledger with a program that made it (an older pmm, or sqlite3), and this user cannot write it; when no program has the ledger open, remove it (as user {} or root: in a sticky directory such as /tmp only they can)",
                    md.uid(),
                    md.uid()
                )),
            ));
        }
        if !md.is_file() || !md.permissions().readonly() {
            continue;
        }
        let mode = ledger.permissions().mode() & 0o7777;
        if std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).is_err() {
            return Err(Error::io(
                &p,
                std::io::Error::other(format!(
                    "read-only, left by a reader while the ledger was read-only; make it writable (chmod u+w '{}') or, when no program has the ledger open, remove it",
                    p.display()
                )),
            ));
        }
    }
    Ok(())
}
