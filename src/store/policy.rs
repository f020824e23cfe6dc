//! The write policy (SPEC §2.5): which actors may not write which sensitive kinds.
//!
//! The policy is the newest `config` event whose content is a JSON object with
//! `"type":"policy"`; while a ledger has none, the reference default applies (actor `cli` may
//! write none of the four sensitive kinds). Unlike the reference, we **fail closed**: a newer
//! `config` whose content mentions "policy" but cannot be read as JSON, or a policy whose
//! `forbid_sources` is not an object of lists, refuses every sensitive write until a readable
//! policy is appended after it. (A non-JSON config that does not mention "policy" cannot be
//! the policy and is skipped.)
//! The lookup walks `config` events newest first through the `idx_kind` index: it never scans
//! the ledger.

use rusqlite::Connection;
use serde_json::Value;

/// The policy in force.
#[derive(Debug, Clone, PartialEq)]
pub enum Policy {
    /// No policy event: the reference default.
    Default,
    /// A policy event's `forbid_sources` object.
    Found(i64, serde_json::Map<String, Value>),
    /// A config that may be the policy could not be read (event id, why).
    Unreadable(i64, String),
}

/// What the policy says about one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead.
    Allowed,
    /// The policy forbids it.
    Forbidden,
    /// The policy cannot be read: refused (event id, why).
    Unreadable(i64, String),
}

impl Policy {
    /// Finds the policy in force, as `conn` sees the ledger.
    pub fn current(conn: &Connection) -> rusqlite::Result<Policy> {
        let mut stmt = conn.prepare_cached(
            "SELECT id, content FROM events WHERE kind = 'config' ORDER BY id DESC",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let id: i64 = row.get(0)?;
            let content: String = match row.get_ref(1)? {
                rusqlite::types::ValueRef::Text(b) => String::from_utf8_lossy(b).into_owned(),
                _ => return Ok(Policy::Unreadable(id, "content is not text".into())),
            };
            return Ok(match serde_json::from_str::<Value>(&content) {
                // A broken config that may have been a policy: refuse (fail closed). One that
                // cannot have been (no mention of "policy") is not a policy; skipping it
                // keeps the older policy in force, so it weakens nothing, and junk written
                // by an allowed actor cannot block every sensitive write for good.
                Err(e) if content.contains("policy") => {
                    Policy::Unreadable(id, format!("content is not JSON ({e})"))
                }
                Err(_) => continue,
                Ok(Value::Object(obj))
                    if obj.get("type") == Some(&Value::String("policy".into())) =>
                {
                    match obj.get("forbid_sources") {
                        Some(Value::Object(fs)) => Policy::Found(id, fs.clone()),
                        None | Some(Value::Null) => Policy::Found(id, Default::default()),
                        Some(_) => Policy::Unreadable(id, "forbid_sources is not an object".into()),
                    }
                }
                Ok(_) => continue,
            });
        }
        Ok(Policy::Default)
    }

    /// The verdict on `actor` writing `kind`.
    pub fn verdict(&self, actor: &str, kind: &str) -> Verdict {
        match self {
            Policy::Default => {
                if actor == "cli" && crate::event::is_sensitive(kind) {
                    Verdict::Forbidden
                } else {
                    Verdict::Allowed
                }
            }
            Policy::Unreadable(id, why) => Verdict::Unreadable(*id, why.clone()),
            Policy::Found(id, fs) => match fs.get(actor) {
                None | Some(Value::Null) => Verdict::Allowed,
                Some(Value::Array(kinds)) => {
                    if kinds.iter().any(|k| k.as_str() == Some(kind)) {
                        Verdict::Forbidden
                    } else {
                        Verdict::Allowed
                    }
                }
                Some(_) => {
                    Verdict::Unreadable(*id, format!("forbid_sources.{actor} is not a list"))
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_forbids_only_cli() {
        assert_eq!(Policy::Default.verdict("cli", "config"), Verdict::Forbidden);
        assert_eq!(
            Policy::Default.verdict("unknown", "config"),
            Verdict::Allowed
        );
    }

    fn ledger(configs: &[&str]) -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY, kind TEXT, content TEXT)").unwrap();
        for (i, content) in configs.iter().enumerate() {
            c.execute("INSERT INTO events VALUES (?1, 'config', ?2)", rusqlite::params![i as i64 + 1, content]).unwrap();
        }
        c
    }

    #[test]
    fn newest_readable_policy_wins_and_broken_policies_fail_closed() {
        let policy = r#"{"type":"policy","forbid_sources":{"bot":["config"]}}"#;
        let retrieval = r#"{"type":"retrieval","strategy":"fixed","limit":3}"#;
        assert_eq!(Policy::current(&ledger(&[])).unwrap(), Policy::Default);
        let found = Policy::current(&ledger(&[policy, retrieval, "not json at all"])).unwrap();
        assert!(matches!(found, Policy::Found(1, _)), "{found:?}");
        let broken = Policy::current(&ledger(&[policy, r#"{"type":"policy","forbid_sources":"#])).unwrap();
        assert!(matches!(broken, Policy::Unreadable(2, _)), "{broken:?}");
        assert!(matches!(broken.verdict("anyone", "config"), Verdict::Unreadable(2, _)));
        let odd = Policy::current(&ledger(&[r#"{"type":"policy","forbid_sources":[1]}"#])).unwrap();
        assert!(matches!(odd, Policy::Unreadable(1, _)));
    }

    #[test]
    fn found_policy_is_a_list_per_actor() {
        let fs: serde_json::Map<String, Value> =
            serde_json::from_str(r#"{"bot":["embedding_add"],"odd":"config"}"#).unwrap();
        let p = Policy::Found(7, fs);
        assert_eq!(p.verdict("bot", "embedding_add"), Verdict::Forbidden);
        assert_eq!(p.verdict("bot", "config"), Verdict::Allowed);
        assert_eq!(p.verdict("cli", "config"), Verdict::Allowed);
        assert!(matches!(
            p.verdict("odd", "config"),
            Verdict::Unreadable(..)
        ));
    }
}
