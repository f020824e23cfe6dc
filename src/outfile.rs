//! The one way pmm writes an output file (`pmm-export -o`, chat's `/export`): never onto the
//! ledger or one of its companion files (`-wal`, `-shm`, `-journal`, `-turn`), recognized by what
//! they are — through symlinks, `./` and hard links — not only by name; and always through a
//! temporary file beside the target that is renamed into place only when complete, so a
//! failed or interrupted write leaves no half file and does not destroy the old one (SPEC §3).
//! An existing file keeps its mode; a new one gets the usual `0666` less the umask.

use crate::{Error, Result};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The files SQLite keeps beside a ledger, and pmm's writers' turnstile (`store/sqlite/busy.rs`).
const COMPANIONS: [&str; 5] = ["", "-wal", "-shm", "-journal", "-turn"];

/// An output file being written. Write through [`OutputFile::writer`], then
/// [`OutputFile::commit`]; dropped without a commit, it leaves the target as it was.
pub struct OutputFile {
    target: PathBuf,
    kind: Kind,
}

enum Kind {
    /// A regular file (or a new one): a temporary file beside it, renamed at the end.
    Temp {
        tmp: tempfile::NamedTempFile,
        mode: u32,
    },
    /// A device or a pipe (`/dev/stdout`, a FIFO): written directly, nothing to rename.
    Direct(File),
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The absolute path `path` names, its symlinks resolved: the whole path when it exists,
/// else its folder's, with the file name as given.
fn resolve(path: &Path) -> Option<PathBuf> {
    if let Ok(p) = fs::canonicalize(path) {
        return Some(p);
    }
    let name = path.file_name()?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Some(fs::canonicalize(dir).ok()?.join(name))
}

/// Refuses `target` when it is the ledger at `ledger` or one of its companion files, by
/// identity (device and inode, whatever path leads there) or by resolved name (for a
/// companion that does not exist at the moment).
pub fn check_not_ledger(target: &Path, ledger: &Path) -> Result<()> {
    let refuse = |what: &str| {
        Err(Error::WouldOverwriteLedger {
            target: target.to_path_buf(),
            what: what.to_string(),
            ledger: ledger.to_path_buf(),
        })
    };
    let describe = |suffix: &str| {
        if suffix.is_empty() {
            "the file".to_string()
        } else {
            format!("the {suffix} file")
        }
    };
    let target_id = fs::metadata(target).ok().map(|m| (m.dev(), m.ino()));
    let target_name = resolve(target);
    // The ledger as named and as resolved: SQLite names its companions after either.
    let mut bases = vec![ledger.to_path_buf()];
    if let Some(r) = resolve(ledger) {
        bases.push(r);
    }
    for base in &bases {
        for suffix in COMPANIONS {
            let companion = with_suffix(base, suffix);
            if let (Some(t), Ok(m)) = (target_id, fs::metadata(&companion)) {
                if t == (m.dev(), m.ino()) {
                    return refuse(&describe(suffix));
                }
            }
            if target_name.is_some() && target_name == resolve(&companion) {
                return refuse(&describe(suffix));
            }
        }
    }
    Ok(())
}

/// The process's umask (read by setting it and putting it back).
fn umask() -> u32 {
    // SAFETY: umask only swaps the process's file mode mask; it is restored at once.
    unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old as u32
    }
}

impl OutputFile {
    /// Starts writing `target`, refusing it when it is (a companion of) `ledger`. The
    /// temporary file is created beside the file `target` resolves to (a symlink stays a
    /// symlink; the file it points to is replaced).
    pub fn create(target: &Path, ledger: Option<&Path>) -> Result<OutputFile> {
        if let Some(l) = ledger {
            check_not_ledger(target, l)?;
        }
        let existing = fs::metadata(target).ok();
        if let Some(md) = &existing {
            if md.is_dir() {
                return Err(Error::OutputIsDirectory(target.to_path_buf()));
            }
            if !md.is_file() {
                // A device or a pipe: nothing to rename; write it as it is.
                let f = fs::OpenOptions::new()
                    .write(true)
                    .open(target)
                    .map_err(|e| Error::io(target, e))?;
                return Ok(OutputFile {
                    target: target.into(),
                    kind: Kind::Direct(f),
                });
            }
        }
        let real = match &existing {
            Some(_) => fs::canonicalize(target).map_err(|e| Error::io(target, e))?,
            None => target.to_path_buf(),
        };
        let dir = real
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| Error::io(dir, e))?;
        let mode = match &existing {
            Some(md) => md.permissions().mode() & 0o7777,
            None => 0o666 & !umask(),
        };
        Ok(OutputFile {
            target: real,
            kind: Kind::Temp { tmp, mode },
        })
    }

    /// The path written (symlinks resolved).
    pub fn path(&self) -> &Path {
        &self.target
    }

    /// A buffered writer into the file.
    pub fn writer(&self) -> Result<io::BufWriter<File>> {
        let f = match &self.kind {
            Kind::Temp { tmp, .. } => tmp.as_file().try_clone(),
            Kind::Direct(f) => f.try_clone(),
        }
        .map_err(|e| Error::io(&self.target, e))?;
        Ok(io::BufWriter::with_capacity(1 << 16, f))
    }

    /// Makes the file durable and puts it in place of the target. Flush the writer first.
    pub fn commit(self) -> Result<()> {
        let target = self.target;
        match self.kind {
            Kind::Direct(mut f) => f.flush().map_err(|e| Error::io(&target, e)),
            Kind::Temp { tmp, mode } => {
                let f = tmp.as_file();
                f.set_permissions(fs::Permissions::from_mode(mode))
                    .map_err(|e| Error::io(&target, e))?;
                f.sync_all().map_err(|e| Error::io(&target, e))?;
                tmp.persist(&target)
                    .map_err(|e| Error::io(&target, e.error))?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_and_its_companions_are_refused_by_name_and_identity() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("d.db");
        fs::write(&ledger, b"x").unwrap();
        fs::write(dir.path().join("d.db-wal"), b"").unwrap();
        for t in ["d.db", "d.db-wal", "d.db-shm", "d.db-journal", "./d.db"] {
            let p = dir.path().join(t);
            assert!(check_not_ledger(&p, &ledger).is_err(), "{t}");
        }
        std::os::unix::fs::symlink(&ledger, dir.path().join("link")).unwrap();
        fs::hard_link(&ledger, dir.path().join("hard")).unwrap();
        assert!(check_not_ledger(&dir.path().join("link"), &ledger).is_err());
        assert!(check_not_ledger(&dir.path().join("hard"), &ledger).is_err());
        assert!(check_not_ledger(&dir.path().join("d.json"), &ledger).is_ok());
        assert!(check_not_ledger(&dir.path().join("d.db-x"), &ledger).is_ok());
    }

    #[test]
    fn an_uncommitted_file_leaves_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.txt");
        fs::write(&target, b"old").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o640)).unwrap();
        {
            let f = OutputFile::create(&target, None).unwrap();
            f.writer().unwrap().write_all(b"half").unwrap();
        }
        assert_eq!(fs::read(&target).unwrap(), b"old");
        let f = OutputFile::create(&target, None).unwrap();
        let mut w = f.writer().unwrap();
        w.write_all(b"new").unwrap();
        w.flush().unwrap();
        f.commit().unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        let mode = fs::metadata(&target).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temp left");
    }
}
