//! A new ledger built where nobody can see it, then put in place whole (`pmm-append --import`
//! into a path that holds no ledger yet).
//!
//! The ledger is built in a temporary file beside its path, `.NAME.import-PID`, without a
//! journal: no other process knows the file, so there is nothing to protect but the import
//! itself, and a crash only leaves that file behind. Every page is written once, straight into
//! the file, instead of twice through a WAL as large as the ledger (which a 10^7-event import
//! also had to search). At the end the file is switched to WAL mode like every ledger, synced,
//! and hard-linked to its path: `link` fails if a file appeared there meanwhile, so a ledger is
//! never overwritten (POSIX, every local and network file system that has hard links; Linux's
//! `renameat2(RENAME_NOREPLACE)` is neither portable nor supported by NFS). A crash leaves no
//! ledger at the path or the whole one.
//!
//! While it builds, the temporary file is locked (`flock`); the next import into the same path
//! removes a temporary file it can lock, which a killed import left behind. (Where `flock` is
//! emulated with `fcntl` locks, as on NFS, SQLite's closing of the file releases the lock just
//! before the link: a second import into the same path at that moment can remove the file, and
//! the first then fails to link it — an error, never a half ledger.)

use super::Ledger;
use crate::{Error, Result};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A ledger being built for a path that holds none yet. Build it through
/// [`Fresh::ledger`], then [`Fresh::publish`] it; dropped unpublished, it removes its
/// temporary file and leaves the path as it was.
pub struct Fresh {
    ledger: Option<Ledger>,
    tmp: PathBuf,
    target: PathBuf,
    /// The temporary file, locked while this import owns it.
    file: File,
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Whether anything (a file, a dangling symlink) is at `path`.
fn occupied(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// Takes `file`'s lock without waiting: whether it was free.
fn try_lock(file: &File) -> bool {
    // SAFETY: flock on a descriptor this File owns; no memory is involved.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Syncs the folder `dir` (a new or removed name in it survives a crash).
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

impl Fresh {
    /// Starts a new ledger for `target`; `None` when something is at `target` (or at its
    /// `-wal`, `-shm` or `-journal` name) or its folder cannot hold hard links: then the
    /// caller writes the ledger in place, in a WAL, as any write.
    pub fn start(target: &Path, busy_ms: u64) -> Result<Option<Fresh>> {
        if ["", "-wal", "-shm", "-journal"]
            .iter()
            .any(|s| occupied(&with_suffix(target, s)))
        {
            return Ok(None);
        }
        let Some(name) = target.file_name() else {
            return Ok(None);
        };
        let dir = target
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let prefix = format!(".{}.import-", name.to_string_lossy());
        remove_stale(dir, &prefix);
        let tmp = dir.join(format!("{prefix}{}", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(|e| Error::io(&tmp, e))?;
        let mut fresh = Fresh {
            ledger: None,
            tmp,
            target: target.into(),
            file,
        };
        if !try_lock(&fresh.file) || !fresh.can_link() {
            return Ok(None);
        }
        fresh.ledger = Some(Ledger::create_unjournaled(&fresh.tmp, busy_ms)?);
        Ok(Some(fresh))
    }

    /// Whether the folder holds hard links (FAT and some FUSE file systems do not).
    fn can_link(&self) -> bool {
        let probe = with_suffix(&self.tmp, ".link");
        let ok = fs::hard_link(&self.tmp, &probe).is_ok();
        let _ = fs::remove_file(&probe);
        ok
    }

    /// The ledger being built.
    pub fn ledger(&mut self) -> &mut Ledger {
        self.ledger
            .as_mut()
            .expect("a Fresh holds its ledger until it is published")
    }

    /// Takes the ledger being built out, for a handle above the backend to hold
    /// (`store::Fresh`); [`Fresh::publish_with`] gives it back.
    pub(crate) fn take_ledger(&mut self) -> Ledger {
        self.ledger
            .take()
            .expect("a Fresh holds its ledger until it is published")
    }

    /// [`Fresh::publish`] with the ledger [`Fresh::take_ledger`] took.
    pub(crate) fn publish_with(mut self, ledger: Ledger) -> Result<()> {
        self.ledger = Some(ledger);
        self.publish()
    }

    /// Puts the finished ledger at its path: WAL mode, synced, linked to the path (refused,
    /// exit 2, when a file appeared there meanwhile: it is left as it is), the folder synced,
    /// the temporary name removed.
    pub fn publish(mut self) -> Result<()> {
        if let Some(l) = self.ledger.take() {
            l.finish_unjournaled()?;
        }
        self.file.sync_all().map_err(|e| Error::io(&self.tmp, e))?;
        match fs::hard_link(&self.tmp, &self.target) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(Error::ImportRefused(format!(
                    "{}: a file appeared at this path while the import ran; it was left as it is and nothing was imported",
                    self.target.display()
                )))
            }
            Err(e) => return Err(Error::io(&self.target, e)),
        }
        let dir = self
            .tmp
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        sync_dir(&dir)?;
        fs::remove_file(&self.tmp).map_err(|e| Error::io(&self.tmp, e))?;
        sync_dir(&dir)
    }
}

impl Drop for Fresh {
    fn drop(&mut self) {
        // Unpublished (an error, a refused import): close the ledger, then remove its file.
        // Published: the name is already gone.
        drop(self.ledger.take());
        let _ = fs::remove_file(&self.tmp);
    }
}

/// Removes the temporary files named `prefix…` in `dir` that no import holds (their lock is
/// free): left by an import that was killed.
fn remove_stale(dir: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let path = entry.path();
        if OpenOptions::new()
            .read(true)
            .open(&path)
            .is_ok_and(|f| try_lock(&f))
        {
            let _ = fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Clock, Kind, NewEvent};
    use crate::store::Reads;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    fn one_event(fresh: &mut Fresh) {
        let ev = NewEvent::new(Kind::UserMessage, "hello", serde_json::Map::new()).unwrap();
        fresh
            .ledger()
            .append_unchecked(&ev, &Clock::System)
            .unwrap();
    }

    #[test]
    fn a_published_ledger_is_an_ordinary_wal_ledger_and_nothing_else_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub/new.db");
        let mut fresh = Fresh::start(&target, 1000).unwrap().unwrap();
        one_event(&mut fresh);
        assert!(!target.exists(), "nothing at the path before the publish");
        fresh.publish().unwrap();
        assert_eq!(names(&dir.path().join("sub")), vec!["new.db"]);
        let l = Ledger::open_reader(&target).unwrap();
        assert_eq!(l.max_id().unwrap(), 1);
        let mode: String = l
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn an_unpublished_ledger_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("new.db");
        let mut fresh = Fresh::start(&target, 1000).unwrap().unwrap();
        one_event(&mut fresh);
        drop(fresh);
        assert_eq!(names(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn an_occupied_path_is_not_built_beside() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("new.db");
        fs::write(with_suffix(&target, "-wal"), b"").unwrap();
        assert!(Fresh::start(&target, 1000).unwrap().is_none());
        fs::write(&target, b"").unwrap();
        assert!(Fresh::start(&target, 1000).unwrap().is_none());
        assert_eq!(names(dir.path()), vec!["new.db", "new.db-wal"]);
    }

    #[test]
    fn a_killed_import_s_file_is_removed_and_a_running_one_s_kept() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("new.db");
        let stale = dir.path().join(".new.db.import-1");
        let running = dir.path().join(".new.db.import-2");
        let other = dir.path().join(".other.db.import-3");
        for p in [&stale, &running, &other] {
            fs::write(p, b"x").unwrap();
        }
        let held = File::open(&running).unwrap();
        assert!(try_lock(&held));
        let fresh = Fresh::start(&target, 1000).unwrap().unwrap();
        let mine = fresh.tmp.file_name().unwrap().to_str().unwrap().to_string();
        let mut want = vec![mine, ".new.db.import-2".into(), ".other.db.import-3".into()];
        want.sort();
        assert_eq!(names(dir.path()), want);
        drop(fresh);
        drop(held);
    }
}
