//! `REF: <path>#<id>` resolution (FORMATS.md §3.8), read-only.
//!
//! The reference opened the target with its writer, which creates the file and the schema
//! when the path does not exist: a model could create SQLite files anywhere the process may
//! write (FORMATS.md §17 item 9). Here a target is only ever opened with
//! [`Ledger::open_untouched`] (read-only, and leaving not even SQLite's `-wal`/`-shm` files behind), and only when it is an existing regular file (a FIFO or a device
//! at a model-chosen path could block the turn or read forever). Relative paths are resolved
//! against the current directory, as the reference did; `~` is not expanded.

use crate::store::{Ledger, Reads};
use crate::Error;
use serde_json::{json, Map, Value};
use std::path::Path;

/// Splits a `REF:` target into the ledger path and the event id: at the first `#`, the path
/// Python-stripped and non-empty, the id a Python `int()` (`"47"`, `" 47 "`, `"+4_7"`) that
/// fits i64. `None` when there is no `#` or either part is unusable: such a ref is skipped,
/// as in the reference.
pub fn parse_ref(target: &str) -> Option<(String, i64)> {
    let (path, id) = target.split_once('#')?;
    let path = crate::marker::py_strip(path);
    if path.is_empty() {
        return None;
    }
    match super::py_int_str(id)? {
        super::PyInt::Small(id) => Some((path.to_string(), id)),
        super::PyInt::Huge(_) => None,
    }
}

/// The content of the `inter_ledger_ref` event for a ref: `REF: <path>#<id>`, re-rendered
/// from the parsed parts as the reference does.
pub fn ref_content(path: &str, id: i64) -> String {
    format!("REF: {path}#{id}")
}

/// What looking up a ref found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefOutcome {
    /// The event exists in the target ledger.
    Verified {
        /// Its stored hash (`None` for a row without one).
        target_hash: Option<String>,
    },
    /// The event could not be found, and why: `not found` (the reference's text for an absent
    /// id), `no such ledger`, `not a ledger: …`, `unreadable: …`.
    Unverified {
        /// Why.
        error: String,
    },
}

impl RefOutcome {
    /// True when the event was found.
    pub fn verified(&self) -> bool {
        matches!(self, RefOutcome::Verified { .. })
    }

    /// The `inter_ledger_ref` meta, as the reference writes it: `{"target_hash":…,
    /// "verified":true}` or `{"error":…,"verified":false}`.
    pub fn meta_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        match self {
            RefOutcome::Verified { target_hash } => {
                m.insert("target_hash".into(), json!(target_hash));
                m.insert("verified".into(), Value::Bool(true));
            }
            RefOutcome::Unverified { error } => {
                m.insert("error".into(), Value::String(error.clone()));
                m.insert("verified".into(), Value::Bool(false));
            }
        }
        m
    }

    /// [`RefOutcome::meta_map`] as a JSON value.
    pub fn meta(&self) -> Value {
        Value::Object(self.meta_map())
    }
}

/// Looks up event `id` in the ledger at `path`, read-only. Never creates, and never writes to,
/// any file; never fails: whatever goes wrong is the outcome's `error`.
pub fn resolve_ref(path: &Path, id: i64) -> RefOutcome {
    let unverified = |error: String| RefOutcome::Unverified { error };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return unverified("no such ledger".into())
        }
        Err(e) => return unverified(format!("unreadable: {e}")),
        Ok(md) if !md.is_file() => return unverified("not a ledger: not a regular file".into()),
        Ok(_) => {}
    }
    let ledger = match Ledger::open_untouched(path) {
        Ok(l) => l,
        Err(Error::MissingLedger(_)) => return unverified("no such ledger".into()),
        Err(Error::NotALedger { why, .. }) => return unverified(format!("not a ledger: {why}")),
        Err(e) => return unverified(format!("unreadable: {e}")),
    };
    match ledger.get(id) {
        Ok(Some(ev)) => RefOutcome::Verified {
            target_hash: ev.hash,
        },
        Ok(None) => unverified("not found".into()),
        Err(Error::NotALedger { why, .. }) => unverified(format!("not a ledger: {why}")),
        Err(e) => unverified(format!("unreadable: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Clock, Kind, NewEvent};

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
            let ev = NewEvent::new(Kind::TestEvent, content, Map::new()).unwrap();
            hashes.push(l.append(&ev, &clock).unwrap().hash.unwrap());
        }
        drop(l);
        hashes
    }

    #[test]
    fn parse_ref_splits_at_the_first_hash() {
        assert_eq!(
            parse_ref("../other_pmm.db#47"),
            Some(("../other_pmm.db".into(), 47))
        );
        assert_eq!(parse_ref(" a.db # +4_7 "), Some(("a.db".into(), 47)));
        assert_eq!(parse_ref("a#b.db#3"), None); // id "b.db#3"
        assert_eq!(parse_ref("a.db#-1"), Some(("a.db".into(), -1)));
        assert_eq!(parse_ref("a.db"), None);
        assert_eq!(parse_ref("a.db#"), None);
        assert_eq!(parse_ref("a.db#x"), None);
        assert_eq!(parse_ref("a.db#1.5"), None);
        assert_eq!(parse_ref("#3"), None);
        assert_eq!(parse_ref("a.db#99999999999999999999"), None);
        assert_eq!(
            ref_content("../other_pmm.db", 47),
            "REF: ../other_pmm.db#47"
        );
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
