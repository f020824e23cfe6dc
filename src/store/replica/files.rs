//! The files a host keeps for a PostgreSQL ledger, and who may read them: the cache holds the
//! mind's text, so its directory is made `0700` and its files `0600` (whatever the umask),
//! and a cache file that is a symbolic link, not a regular file, or another user's is refused
//! rather than read or written (another user could read the mind through it, or hand this
//! host a history of their own).

use crate::{Error, Result};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The companion files SQLite keeps beside a cache file.
pub(crate) const SUFFIXES: [&str; 4] = ["", "-wal", "-shm", "-erased"];

/// `path` with `suffix` added to its name.
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// This process's effective user.
fn me() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// What to do when the cache directory cannot be used, for a message.
fn fix(dir: &Path) -> String {
    format!(
        "set PMM_CACHE_DIR to a directory this user (uid {}) can write, or make {} writable by it",
        me(),
        dir.display()
    )
}

/// Makes the directory of `file` (mode `0700`) when it does not exist, and makes `file`
/// itself (empty, mode `0600`) so that SQLite opens it with that mode and gives its `-wal`
/// and `-shm` the same. An existing cache file must be a regular file of this user's; one
/// readable by others (made by an older pmm) is made `0600`, with its companions.
pub(crate) fn prepare(file: &Path) -> Result<()> {
    let dir = prepare_dir(file)?;
    for suffix in SUFFIXES {
        let path = with_suffix(file, suffix);
        match std::fs::symlink_metadata(&path) {
            Ok(md) => owned(&path, &md)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && suffix.is_empty() => {
                match std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                {
                    Ok(_) => {}
                    // Another process made it meanwhile: check what it made.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        let md =
                            std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, e))?;
                        owned(&path, &md)?;
                    }
                    Err(e) => return Err(unusable(dir, &e)),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&path, e)),
        }
    }
    Ok(())
}

/// Makes the directory of `file` (mode `0700`, and its missing parents) when it does not
/// exist; an existing one is left as it is (it may be one the user named, shared with other
/// things). The directory.
pub(crate) fn prepare_dir(file: &Path) -> Result<&Path> {
    let dir = file.parent().unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| unusable(dir, &e))?;
    }
    Ok(dir)
}

/// Refuses a cache file that is a link, not a regular file, or another user's; makes one
/// that others could read `0600`.
pub(crate) fn owned(path: &Path, md: &std::fs::Metadata) -> Result<()> {
    let refuse = |why: String| {
        Error::CannotRead {
        path: path.into(),
        why: format!(
            "{why}: a host's cache of a PostgreSQL ledger must be a regular file of the user running pmm (remove it, or set PMM_CACHE_DIR to a directory of this user's)"
        ),
    }
    };
    if md.file_type().is_symlink() {
        return Err(refuse("it is a symbolic link".into()));
    }
    if !md.is_file() {
        return Err(refuse("it is not a regular file".into()));
    }
    if md.uid() != me() {
        return Err(refuse(format!("it belongs to user {}", md.uid())));
    }
    if md.mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

/// The error for a cache directory that cannot be made or written, saying what to do.
pub(crate) fn unusable(dir: &Path, e: &std::io::Error) -> Error {
    Error::CannotRead {
        path: dir.into(),
        why: format!(
            "the cache directory of this PostgreSQL ledger cannot be written ({e}): {}",
            fix(dir)
        ),
    }
}

/// Writes `text` to `path` (mode `0600`) in one step: written beside it, then renamed over
/// it, so that a reader sees the old text or the new, never part of one.
pub(crate) fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = with_suffix(path, &format!(".{}.tmp", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    // Not synced: after a crash the file may hold an older head (a weaker check, never a
    // false alarm) or nothing (read as no head, and the cache's own head is checked).
    let written = f.write_all(text.as_bytes());
    drop(f);
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
