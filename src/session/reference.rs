//! Reading a `REF:` target for the turn: the only file I/O a ref causes, read-only. A target
//! is only ever opened with [`Ledger::open_untouched`] (read-only, and leaving not even
//! SQLite's `-wal`/`-shm` files behind), and only when it is an existing regular file (a FIFO
//! or a device at a model-chosen path could block the turn or read forever). What it finds goes
//! back to [`crate::claim`] as a [`RefLookup`].

use crate::claim::{RefLookup, RefRequest};
use crate::store::{EventLog, Ledger};
use crate::Error;
use std::path::Path;

/// Looks up the event a ref asks for, read-only. Never creates, and never writes to, any
/// file; never fails: whatever goes wrong is the lookup's answer.
pub fn resolve(req: &RefRequest) -> RefLookup {
    let path = Path::new(&req.path);
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return RefLookup::NoLedger,
        Err(e) => return RefLookup::Unreadable(e.to_string()),
        Ok(md) if !md.is_file() => return RefLookup::NotAFile,
        Ok(_) => {}
    }
    let ledger = match Ledger::open_untouched(path) {
        Ok(l) => l,
        Err(Error::MissingLedger(_)) => return RefLookup::NoLedger,
        Err(Error::NotALedger { why, .. }) => return RefLookup::NotALedger(why),
        Err(e) => return RefLookup::Unreadable(e.to_string()),
    };
    match ledger.get(req.id) {
        Ok(Some(ev)) => RefLookup::Found { hash: ev.hash },
        Ok(None) => RefLookup::Absent,
        Err(Error::NotALedger { why, .. }) => RefLookup::NotALedger(why),
        Err(e) => RefLookup::Unreadable(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claim::RefOutcome;
    use crate::event::{Clock, NewEvent};
    use serde_json::{json, Map};

    /// The verdict on `REF: <path>#<id>`, as a turn records it.
    fn resolve_ref(path: &Path, id: i64) -> RefOutcome {
        let req = RefRequest {
            path: path.to_str().unwrap().into(),
            id,
        };
        RefOutcome::from(resolve(&req))
    }

    fn dir_listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A ledger with two events, closed again (so it is one file, as a ledger at rest is).
    fn make_ledger(path: &Path) -> Vec<String> {
        let clock = Clock::pinned("2025-11-24T00:00:00Z").unwrap();
        let mut l = Ledger::open_writer(path, 1000).unwrap();
        let mut hashes = Vec::new();
        for content in ["a", "b"] {
            let ev = NewEvent::new(crate::event::Kind::TestEvent, content, Map::new()).unwrap();
            hashes.push(
                crate::session::append(&mut l, &ev, &clock)
                    .unwrap()
                    .hash
                    .unwrap(),
            );
        }
        drop(l);
        hashes
    }

    #[test]
    fn resolve_ref_finds_an_event_and_leaves_the_ledger_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.db");
        let hashes = make_ledger(&path);
        let before = std::fs::read(&path).unwrap();
        let files = dir_listing(dir.path());

        let found = resolve_ref(&path, 2);
        assert_eq!(
            found,
            RefOutcome::Verified {
                target_hash: Some(hashes[1].clone())
            }
        );
        assert!(found.verified());
        assert_eq!(
            found.meta(),
            json!({"target_hash": hashes[1], "verified": true})
        );

        let absent = resolve_ref(&path, 47);
        assert_eq!(
            absent.meta(),
            json!({"error": "not found", "verified": false})
        );
        assert!(!absent.verified());

        assert_eq!(std::fs::read(&path).unwrap(), before);
        // Not even SQLite's -wal and -shm files appear (the ledger is at rest: opened
        // immutable).
        assert_eq!(dir_listing(dir.path()), files);
    }

    #[test]
    fn resolve_ref_never_creates_a_missing_ledger() {
        // FORMATS.md §17 item 9: the reference created this file.
        let dir = tempfile::tempdir().unwrap();
        for rel in ["nonexist.db", "sub/dir/nonexist.db"] {
            let path = dir.path().join(rel);
            assert_eq!(
                resolve_ref(&path, 3).meta(),
                json!({"error": "no such ledger", "verified": false})
            );
            assert!(!path.exists());
        }
        assert_eq!(dir_listing(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn resolve_ref_refuses_files_that_are_not_ledgers() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(
            &text,
            "hello, not sqlite at all, long enough to have a header .....",
        )
        .unwrap();
        let out = resolve_ref(&text, 1);
        assert!(!out.verified());
        let RefOutcome::Unverified { error } = &out else {
            unreachable!()
        };
        assert!(error.starts_with("not a ledger"), "{error}");
        assert_eq!(
            std::fs::read(&text).unwrap(),
            b"hello, not sqlite at all, long enough to have a header ....."
        );

        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, "").unwrap();
        let RefOutcome::Unverified { error } = resolve_ref(&empty, 1) else {
            panic!()
        };
        assert!(error.starts_with("not a ledger"), "{error}");
        assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);

        // A SQLite database of something else.
        let other = dir.path().join("other.sqlite");
        rusqlite::Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t(x)")
            .unwrap();
        let RefOutcome::Unverified { error } = resolve_ref(&other, 1) else {
            panic!()
        };
        assert_eq!(error, "not a ledger: no events table");

        let RefOutcome::Unverified { error } = resolve_ref(dir.path(), 1) else {
            panic!()
        };
        assert_eq!(error, "not a ledger: not a regular file");
        assert_eq!(
            dir_listing(dir.path()),
            ["empty.db", "notes.txt", "other.sqlite"]
        );
    }
}
