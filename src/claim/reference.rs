//! `REF: <path>#<id>` (FORMATS.md §3.8): what a ref asks for ([`RefRequest`]) and what its
//! `inter_ledger_ref` event says about what was found there ([`RefOutcome`]). Pure: the turn
//! reads the target ledger (`session::reference`) and hands back a [`RefLookup`].
//!
//! The reference opened the target with its writer, which creates the file and the schema
//! when the path does not exist: a model could create SQLite files anywhere the process may
//! write (FORMATS.md §17 item 9). pmm's turn only ever opens an existing regular file, read-only.

use serde_json::{json, Map, Value};

/// What a `REF:` line asks to resolve: event `id` of the ledger at `path` (relative paths
/// against the current directory, as the reference; `~` is not expanded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefRequest {
    /// The target ledger's path, Python-stripped, never empty.
    pub path: String,
    /// The event id asked for.
    pub id: i64,
}

impl RefRequest {
    /// The content of the `inter_ledger_ref` event for this ref: `REF: <path>#<id>`,
    /// re-rendered from the parsed parts as the reference does.
    pub fn content(&self) -> String {
        format!("REF: {}#{}", self.path, self.id)
    }
}

/// Splits a `REF:` target into the ledger path and the event id: at the first `#`, the path
/// Python-stripped and non-empty, the id a Python `int()` (`"47"`, `" 47 "`, `"+4_7"`) that
/// fits i64. `None` when there is no `#` or either part is unusable: such a ref is skipped,
/// as in the reference.
pub fn parse_ref(target: &str) -> Option<RefRequest> {
    let (path, id) = target.split_once('#')?;
    let path = crate::marker::py_strip(path);
    if path.is_empty() {
        return None;
    }
    match super::py_int_str(id)? {
        super::PyInt::Small(id) => Some(RefRequest {
            path: path.to_string(),
            id,
        }),
        super::PyInt::Huge(_) => None,
    }
}

/// What reading a ref's target found (the turn reads it; see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefLookup {
    /// The event is there, with its stored hash (`None` for a row without one).
    Found {
        /// Its stored hash.
        hash: Option<String>,
    },
    /// The ledger is there and has no such event.
    Absent,
    /// There is no file at the path.
    NoLedger,
    /// The path is not a regular file (a directory, a FIFO, a device).
    NotAFile,
    /// The file is not a pmm ledger, and why.
    NotALedger(String),
    /// The file could not be read, and why.
    Unreadable(String),
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

impl From<RefLookup> for RefOutcome {
    /// The verdict on a ref, in the reference's words.
    fn from(found: RefLookup) -> Self {
        let unverified = |error: String| RefOutcome::Unverified { error };
        match found {
            RefLookup::Found { hash } => RefOutcome::Verified { target_hash: hash },
            RefLookup::Absent => unverified("not found".into()),
            RefLookup::NoLedger => unverified("no such ledger".into()),
            RefLookup::NotAFile => unverified("not a ledger: not a regular file".into()),
            RefLookup::NotALedger(why) => unverified(format!("not a ledger: {why}")),
            RefLookup::Unreadable(why) => unverified(format!("unreadable: {why}")),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_ref_splits_at_the_first_hash() {
        let req = |path: &str, id| {
            Some(RefRequest {
                path: path.into(),
                id,
            })
        };
        assert_eq!(parse_ref("../other_pmm.db#47"), req("../other_pmm.db", 47));
        assert_eq!(parse_ref(" a.db # +4_7 "), req("a.db", 47));
        assert_eq!(parse_ref("a#b.db#3"), None); // id "b.db#3"
        assert_eq!(parse_ref("a.db#-1"), req("a.db", -1));
        assert_eq!(parse_ref("a.db"), None);
        assert_eq!(parse_ref("a.db#"), None);
        assert_eq!(parse_ref("a.db#x"), None);
        assert_eq!(parse_ref("a.db#1.5"), None);
        assert_eq!(parse_ref("#3"), None);
        assert_eq!(parse_ref("a.db#99999999999999999999"), None);
        assert_eq!(
            parse_ref("../other_pmm.db#47").unwrap().content(),
            "REF: ../other_pmm.db#47"
        );
    }

    #[test]
    fn every_lookup_has_the_reference_s_meta() {
        let meta = |l: RefLookup| RefOutcome::from(l).meta();
        let found = RefOutcome::from(RefLookup::Found {
            hash: Some("ab".into()),
        });
        assert!(found.verified());
        assert_eq!(found.meta(), json!({"target_hash": "ab", "verified": true}));
        assert_eq!(
            meta(RefLookup::Found { hash: None }),
            json!({"target_hash": null, "verified": true})
        );
        for (lookup, error) in [
            (RefLookup::Absent, "not found"),
            (RefLookup::NoLedger, "no such ledger"),
            (RefLookup::NotAFile, "not a ledger: not a regular file"),
            (
                RefLookup::NotALedger("no events table".into()),
                "not a ledger: no events table",
            ),
            (
                RefLookup::Unreadable("disk I/O error".into()),
                "unreadable: disk I/O error",
            ),
        ] {
            assert!(!RefOutcome::from(lookup.clone()).verified());
            assert_eq!(meta(lookup), json!({"error": error, "verified": false}));
        }
    }
}
