//! The `erasure` event (`pmm-append --erase`, `pmm-forget`, a tick's retention pass): one
//! constructor, so that the writer and `pmm-verify --deep` agree on its every byte.

use super::{Event, Kind, NewEvent};
use serde_json::{Map, Value};

/// The `erasure` event that erases `target` for `reason`, written by `actor`: its content
/// names the event and its kind; its meta holds `extra` (a retention pass's rule) and the
/// target's hash, id and kind, the reason and the actor as `source`.
pub fn erasure(
    target: &Event,
    reason: &str,
    actor: &str,
    extra: Option<&Map<String, Value>>,
) -> NewEvent {
    let mut meta = extra.cloned().unwrap_or_default();
    meta.insert(
        "erased_hash".into(),
        Value::String(target.hash.clone().unwrap_or_default()),
    );
    meta.insert("erased_id".into(), target.id.into());
    meta.insert("erased_kind".into(), Value::String(target.kind.to_string()));
    meta.insert("reason".into(), Value::String(reason.to_string()));
    meta.insert("source".into(), Value::String(actor.to_string()));
    NewEvent {
        kind: Kind::Erasure,
        content: content(target.id, &target.kind, reason),
        meta,
    }
}

/// The content of the `erasure` event of event `id`, of `kind`, erased for `reason`.
pub fn content(id: i64, kind: &Kind, reason: &str) -> String {
    format!("erased event {id} ({kind}): {reason}")
}

/// The id an erasure event's `meta` text names (`erased_id`).
pub fn erased_id(meta: &str) -> Option<i64> {
    serde_json::from_str::<serde_json::Value>(meta)
        .ok()?
        .get("erased_id")?
        .as_i64()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes every ledger already holds: the reference's key order, as canonical JSON
    /// sorts them, and the content's wording.
    #[test]
    fn an_erasure_names_its_target() {
        let target = Event {
            id: 7,
            ts: String::new(),
            kind: Kind::UserMessage,
            content: "a card number".into(),
            meta: "{}".into(),
            prev_hash: None,
            hash: Some("ab".into()),
        };
        let ev = erasure(&target, "pii", "owner", None);
        assert_eq!(ev.kind, Kind::Erasure);
        assert_eq!(ev.content, "erased event 7 (user_message): pii");
        assert_eq!(
            crate::canon::to_string(&Value::Object(ev.meta)).unwrap(),
            r#"{"erased_hash":"ab","erased_id":7,"erased_kind":"user_message","reason":"pii","source":"owner"}"#
        );
    }
}
