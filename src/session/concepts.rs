//! The concept layer as the conversation writes it (FORMATS.md §15 steps 4 and 13, §9.6,
//! §3.6; docs/turn.md "Concepts a turn binds"). Concepts come into being through events:
//! whoever binds a token that is not yet defined first appends its `concept_define` (a
//! one-line definition and the source), then the binding. `define_then_bind` and
//! `bind_thread` are the one place that does so, for the turn and for any other writer
//! (the kernel's maintenance, an indexer) that holds a [`Session`].

use super::{meta, Session};
use crate::canon;
use crate::event::{Kind, Source};
use serde_json::{json, Value};

/// The most concepts one turn binds (the reply header's first ones, then the mentioned ones).
pub const MAX_TURN_CONCEPTS: usize = 12;
/// The longest token accepted from a reply header.
pub const MAX_TOKEN_CHARS: usize = 80;

/// A reply header's concept, if it is a token: trimmed, 1 to [`MAX_TOKEN_CHARS`] characters
/// of letters, digits and `._-:`, starting with a letter or digit. A model may put anything in
/// its header; prose, markup or control characters never become concepts.
pub fn as_token(raw: &str) -> Option<String> {
    let t = raw.trim();
    let ok_char = |c: char| c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | ':');
    let starts_well = t.chars().next().is_some_and(char::is_alphanumeric);
    (starts_well && t.chars().count() <= MAX_TOKEN_CHARS && t.chars().all(ok_char))
        .then(|| t.to_string())
}

/// The concepts the reply's JSON header names (FORMATS.md §3.6 (b)): its `concepts` list when
/// the first line parses to an object, as tokens, in order, without repeats.
pub fn header_concepts(reply: &str) -> Vec<String> {
    let first = reply.split('\n').next().unwrap_or(reply);
    let Ok(Value::Object(o)) = serde_json::from_str::<Value>(first) else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for t in o
        .get("concepts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(as_token)
    {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// A one-line definition for a token first met at event `at`: its words, and where.
pub fn default_definition(token: &str, at: i64, source: &str) -> String {
    let words = token
        .rsplit('.')
        .next()
        .unwrap_or(token)
        .replace(['_', '-'], " ");
    format!("{words} (first named at event {at}, by {source})")
}

/// The kind of a token: its first dot-segment (`topic.gardening` → `topic`), else `topic`.
fn kind_of(token: &str) -> &str {
    match token.split_once('.') {
        Some((k, _)) if !k.is_empty() => k,
        _ => "topic",
    }
}

/// Appends `token`'s `concept_define` unless it is defined (as itself or through an alias).
pub(crate) fn ensure_defined(
    s: &mut Session<'_, '_>,
    token: &str,
    definition: &str,
    source: Source,
) -> crate::Result<()> {
    if s.p.concepts.definition(token).is_some() {
        return Ok(());
    }
    let content = canon::built(&json!({
        "attributes": {},
        "concept_kind": kind_of(token),
        "definition": definition,
        "token": token,
        "version": 1,
    }));
    let id = {
        use sha2::Digest as _;
        format!("{:x}", sha2::Sha256::digest(content.as_bytes()))
    };
    s.put(
        Kind::ConceptDefine,
        content,
        meta(&[("concept_id", id.into()), ("source", source.into())]),
    )?;
    Ok(())
}

/// Binds each of `tokens` to event `event_id` with `relation` (one `concept_bind_event` per
/// token, as the reference's active indexing writes them), defining undefined tokens first and
/// skipping bindings that exist.
pub(crate) fn define_then_bind(
    s: &mut Session<'_, '_>,
    event_id: i64,
    tokens: &[String],
    relation: &str,
    source: Source,
) -> crate::Result<()> {
    for tok in tokens {
        ensure_defined(
            s,
            tok,
            &default_definition(tok, event_id, source.as_str()),
            source,
        )?;
        if s.p.concepts.is_bound(tok, event_id) {
            continue;
        }
        let content = json!({"event_id": event_id, "relation": relation, "tokens": [tok]});
        s.put(
            Kind::ConceptBindEvent,
            canon::built(&content),
            meta(&[("source", source.into())]),
        )?;
    }
    Ok(())
}

/// Binds each of `tokens` to commitment `cid` (`concept_bind_thread`, relation `relevant_to`),
/// defining undefined tokens first and skipping bindings that exist.
pub(crate) fn bind_thread(
    s: &mut Session<'_, '_>,
    cid: &str,
    at: i64,
    tokens: &[String],
    source: Source,
) -> crate::Result<()> {
    for tok in tokens {
        ensure_defined(
            s,
            tok,
            &default_definition(tok, at, source.as_str()),
            source,
        )?;
        if s.p.concepts.is_bound_to_thread(tok, cid) {
            continue;
        }
        let content = json!({"cid": cid, "relation": "relevant_to", "tokens": [tok]});
        s.put(
            Kind::ConceptBindThread,
            canon::built(&content),
            meta(&[("source", source.into())]),
        )?;
    }
    Ok(())
}

/// The concepts a turn is about: the reply header's, then the defined concepts the user's text
/// mentions (the injector, §9.6, as the state stood before the reply), at most
/// [`MAX_TURN_CONCEPTS`].
pub fn turn_concepts(header: Vec<String>, mentioned: Vec<String>) -> Vec<String> {
    let mut out = header;
    for m in mentioned {
        if !out.contains(&m) {
            out.push(m);
        }
    }
    out.truncate(MAX_TURN_CONCEPTS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tokens_come_from_a_header() {
        let reply = "{\"concepts\":[\" topic.rain \",\"two words\",\"\",\"topic.rain\",\"- x\",\"a:b_c-d\",7]}\nbody";
        assert_eq!(header_concepts(reply), ["topic.rain", "a:b_c-d"]);
        assert!(header_concepts("no header\n{\"concepts\":[\"x\"]}").is_empty());
        assert_eq!(as_token(&"x".repeat(81)), None);
    }

    #[test]
    fn definitions_and_kinds_read_from_the_token() {
        assert_eq!(
            default_definition("topic.home_garden", 7, "active_indexing"),
            "home garden (first named at event 7, by active_indexing)"
        );
        assert_eq!(kind_of("topic.x"), "topic");
        assert_eq!(kind_of("rain"), "topic");
        assert_eq!(
            turn_concepts(vec!["a".into(), "b".into()], vec!["b".into(), "c".into()]),
            ["a", "b", "c"]
        );
    }
}
