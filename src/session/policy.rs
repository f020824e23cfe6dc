//! The write policy (SPEC §2.5): which actors may not write which sensitive kinds.
//!
//! The policy is the newest `config` event whose content is a JSON object with
//! `"type":"policy"`; while a ledger has none, the reference default applies (actor `cli` may
//! write none of the four sensitive kinds). Unlike the reference, we **fail closed**: a newer
//! `config` whose content mentions "policy" but cannot be read as JSON, or a policy whose
//! `forbid_sources` is not an object of lists, refuses every sensitive write until a readable
//! policy is appended after it. (A non-JSON config that does not mention "policy" cannot be
//! the policy and is skipped.) The way out is a repair: while the policy is unreadable, a
//! `config` that is itself a readable policy is judged by the last readable policy before the
//! broken one (or the default), so a repair never grants more than was already trusted.
//! The lookup walks `config` events newest first (`EventLog::newest_of_kind`, the store's
//! kind index): it never scans the ledger.

use crate::event::Kind;
use crate::store::EventLog;
use serde_json::Value;

/// The policy in force.
#[derive(Debug, Clone, PartialEq)]
pub enum Policy {
    /// No policy event: the reference default.
    Default,
    /// A policy event's `forbid_sources` object.
    Found(i64, serde_json::Map<String, Value>),
    /// A config that may be the policy could not be read (event id, why), and the last
    /// readable policy before it (which judges repairs).
    Unreadable(i64, String, Box<Policy>),
}

/// What the policy says about one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyVerdict {
    /// Go ahead.
    Allowed,
    /// The policy forbids it.
    Forbidden,
    /// The policy cannot be read: refused (event id, why).
    Unreadable(i64, String),
}

impl Policy {
    /// Finds the policy in force, as `r` sees the ledger.
    pub fn current<R: EventLog + ?Sized>(r: &R) -> crate::Result<Policy> {
        let mut finder = Finder::default();
        r.newest_of_kind(Kind::Config, &mut |id, content| finder.offer(id, content))?;
        Ok(finder.finish())
    }

    /// The policy `configs` (ids and contents of `config` events, newest first) put in force.
    pub fn newest_first<'a>(configs: impl IntoIterator<Item = (i64, &'a str)>) -> Policy {
        let mut finder = Finder::default();
        for (id, content) in configs {
            if !finder.offer(id, content) {
                break;
            }
        }
        finder.finish()
    }

    /// The verdict on `actor` writing an event of `kind` with `content`.
    pub fn verdict_for(&self, actor: &str, kind: &Kind, content: &str) -> PolicyVerdict {
        match self {
            Policy::Unreadable(_, _, fallback)
                if *kind == Kind::Config
                    && matches!(read_policy(content), Candidate::Policy(_)) =>
            {
                fallback.verdict(actor, kind)
            }
            _ => self.verdict(actor, kind),
        }
    }

    /// Whether `actor` may erase events (`pmm-append --erase`): only an actor trusted with
    /// the policy itself, i.e. one the policy lets write `config` (under the reference default
    /// every actor but `cli`), and that the policy does not forbid `erasure` by name.
    pub fn erasure_verdict(&self, actor: &str) -> PolicyVerdict {
        match self.verdict(actor, &Kind::Config) {
            PolicyVerdict::Allowed => {}
            other => return other,
        }
        match self {
            Policy::Found(_, _) => self.verdict(actor, &Kind::Erasure),
            _ => PolicyVerdict::Allowed,
        }
    }

    /// The verdict on `actor` writing `kind`.
    pub fn verdict(&self, actor: &str, kind: &Kind) -> PolicyVerdict {
        match self {
            Policy::Default => {
                if actor == "cli" && kind.is_sensitive() {
                    PolicyVerdict::Forbidden
                } else {
                    PolicyVerdict::Allowed
                }
            }
            Policy::Unreadable(id, why, _) => PolicyVerdict::Unreadable(*id, why.clone()),
            Policy::Found(id, fs) => match fs.get(actor) {
                None | Some(Value::Null) => PolicyVerdict::Allowed,
                Some(Value::Array(kinds)) => {
                    if kinds.iter().any(|k| k.as_str() == Some(kind.as_str())) {
                        PolicyVerdict::Forbidden
                    } else {
                        PolicyVerdict::Allowed
                    }
                }
                Some(_) => {
                    PolicyVerdict::Unreadable(*id, format!("forbid_sources.{actor} is not a list"))
                }
            },
        }
    }
}

/// What a `config` content is, as far as the policy goes.
enum Candidate {
    /// Not a policy (another config type, or junk that does not mention "policy").
    NotAPolicy,
    /// A readable policy: its `forbid_sources`.
    Policy(serde_json::Map<String, Value>),
    /// A policy, or what may have been one, that cannot be read.
    Broken(String),
}

/// The walk over `config` events, newest first: the newest readable policy, and the newest
/// broken one above it (whose repairs the readable one judges).
#[derive(Default)]
struct Finder {
    broken: Option<(i64, String)>,
    found: Option<Policy>,
}

impl Finder {
    /// Looks at one `config`; whether to go on to older ones.
    fn offer(&mut self, id: i64, content: &str) -> bool {
        match read_policy(content) {
            Candidate::NotAPolicy => true,
            Candidate::Policy(fs) => {
                self.found = Some(Policy::Found(id, fs));
                false
            }
            // Keep looking for the policy a repair is judged by.
            Candidate::Broken(why) if self.broken.is_none() => {
                self.broken = Some((id, why));
                true
            }
            // An older broken policy: repairs fall back to the default.
            Candidate::Broken(_) => false,
        }
    }

    fn finish(self) -> Policy {
        let found = self.found.unwrap_or(Policy::Default);
        match self.broken {
            Some((id, why)) => Policy::Unreadable(id, why, Box::new(found)),
            None => found,
        }
    }
}

fn read_policy(content: &str) -> Candidate {
    match serde_json::from_str::<Value>(content) {
        // A broken config that may have been a policy: refuse (fail closed). One that cannot
        // have been (no mention of "policy") is not a policy; skipping it keeps the older
        // policy in force, so it weakens nothing, and junk written by an allowed actor cannot
        // block every sensitive write for good.
        Err(e) if content.contains("policy") => {
            Candidate::Broken(format!("content is not JSON ({e})"))
        }
        Err(_) => Candidate::NotAPolicy,
        Ok(Value::Object(obj)) if obj.get("type") == Some(&Value::String("policy".into())) => {
            match obj.get("forbid_sources") {
                Some(Value::Object(fs)) => Candidate::Policy(fs.clone()),
                None | Some(Value::Null) => Candidate::Policy(Default::default()),
                Some(_) => Candidate::Broken("forbid_sources is not an object".into()),
            }
        }
        Ok(_) => Candidate::NotAPolicy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_forbids_only_cli() {
        assert_eq!(
            Policy::Default.verdict("cli", &Kind::Config),
            PolicyVerdict::Forbidden
        );
        assert_eq!(
            Policy::Default.verdict("unknown", &Kind::Config),
            PolicyVerdict::Allowed
        );
    }

    /// The policy of a ledger whose `config` events are `configs`, oldest first (ids 1, 2, …).
    fn current(configs: &[&str]) -> Policy {
        Policy::newest_first(
            configs
                .iter()
                .enumerate()
                .rev()
                .map(|(i, c)| (i as i64 + 1, *c)),
        )
    }

    #[test]
    fn newest_readable_policy_wins_and_broken_policies_fail_closed() {
        let policy = r#"{"type":"policy","forbid_sources":{"bot":["config"]}}"#;
        let retrieval = r#"{"type":"retrieval","strategy":"fixed","limit":3}"#;
        assert_eq!(current(&[]), Policy::Default);
        let found = current(&[policy, retrieval, "not json at all"]);
        assert!(matches!(found, Policy::Found(1, _)), "{found:?}");
        let broken = current(&[policy, r#"{"type":"policy","forbid_sources":"#]);
        assert!(matches!(broken, Policy::Unreadable(2, _, _)), "{broken:?}");
        assert!(matches!(
            broken.verdict("anyone", &Kind::Config),
            PolicyVerdict::Unreadable(2, _)
        ));
        let odd = current(&[r#"{"type":"policy","forbid_sources":[1]}"#]);
        assert!(matches!(odd, Policy::Unreadable(1, _, _)));
    }

    #[test]
    fn repairs_are_judged_by_the_last_readable_policy() {
        let strict = r#"{"type":"policy","forbid_sources":{"cli":["config"]}}"#;
        let p = current(&[strict, r#"{"type":"policy" broken"#]);
        let repair = r#"{"type":"policy","forbid_sources":{}}"#;
        assert_eq!(
            p.verdict_for("operator", &Kind::Config, repair),
            PolicyVerdict::Allowed
        );
        assert_eq!(
            p.verdict_for("cli", &Kind::Config, repair),
            PolicyVerdict::Forbidden
        );
        // Anything that is not a readable policy stays refused.
        assert!(matches!(
            p.verdict_for("operator", &Kind::Config, "{}"),
            PolicyVerdict::Unreadable(2, _)
        ));
        assert!(matches!(
            p.verdict_for("operator", &Kind::EmbeddingAdd, repair),
            PolicyVerdict::Unreadable(2, _)
        ));
        let healed = current(&[strict, r#"{"type":"policy" broken"#, repair]);
        assert_eq!(healed.verdict("cli", &Kind::Config), PolicyVerdict::Allowed);
    }

    #[test]
    fn found_policy_is_a_list_per_actor() {
        let fs: serde_json::Map<String, Value> =
            serde_json::from_str(r#"{"bot":["embedding_add"],"odd":"config"}"#).unwrap();
        let p = Policy::Found(7, fs);
        assert_eq!(
            p.verdict("bot", &Kind::EmbeddingAdd),
            PolicyVerdict::Forbidden
        );
        assert_eq!(p.verdict("bot", &Kind::Config), PolicyVerdict::Allowed);
        assert_eq!(p.verdict("cli", &Kind::Config), PolicyVerdict::Allowed);
        assert!(matches!(
            p.verdict("odd", &Kind::Config),
            PolicyVerdict::Unreadable(..)
        ));
    }
}
