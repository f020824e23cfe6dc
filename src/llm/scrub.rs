//! Scrubbing the API key from what a server sends back. A server (or a proxy) that echoes the
//! request's `Authorization` header inside a successful answer would otherwise get the key
//! into the reply, and from there into the ledger, its reflections and every export. Every
//! string of a successful answer goes through [`value`] before an adapter reads it.

use serde_json::{Map, Value};

/// Keys shorter than this are scrubbed only in their `Bearer <key>` form: a local server's
/// placeholder key (`x`, `none`) replaced everywhere would mangle ordinary replies, and is no
/// secret.
pub(crate) const MIN_SCRUBBED: usize = 8;

/// What replaces the key.
const MASK: &str = "***";

/// `text` with the key replaced by `***`: its `Bearer <key>` form (any case of "Bearer")
/// always, the bare key when it has at least [`MIN_SCRUBBED`] characters.
pub(crate) fn text(text: &str, secret: Option<&str>) -> String {
    let Some(key) = secret.filter(|k| !k.is_empty()) else {
        return text.to_string();
    };
    let mut out = text.to_string();
    if key.chars().count() >= MIN_SCRUBBED {
        out = out.replace(key, MASK);
    } else {
        // "Bearer " is ASCII, so the lowercase copy keeps every byte offset.
        let lower = out.to_ascii_lowercase();
        let needle = format!("bearer {}", key.to_ascii_lowercase());
        let mut result = String::with_capacity(out.len());
        let mut last = 0;
        for (i, _) in lower.match_indices(&needle) {
            if i < last || &out[i + 7..i + needle.len()] != key {
                continue;
            }
            result.push_str(&out[last..i + 7]);
            result.push_str(MASK);
            last = i + needle.len();
        }
        result.push_str(&out[last..]);
        out = result;
    }
    out
}

/// `v` with the key scrubbed from every string and every object key in it.
pub(crate) fn value(v: Value, secret: Option<&str>) -> Value {
    if secret.is_none_or(str::is_empty) {
        return v;
    }
    match v {
        Value::String(s) => Value::String(text(&s, secret)),
        Value::Array(items) => Value::Array(items.into_iter().map(|x| value(x, secret)).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, x)| (text(&k, secret), value(x, secret)))
                .collect::<Map<String, Value>>(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_key_and_its_bearer_form_are_scrubbed_everywhere() {
        let key = "sk-test-0123456789";
        let v = json!({"model": format!("m-{key}"), "choices": [{"message": {"content": format!("Authorization: Bearer {key}\nkey {key}")}}], key: 1});
        let s = value(v, Some(key)).to_string();
        assert!(!s.contains(key), "{s}");
        assert!(s.contains("Bearer ***"), "{s}");
    }

    #[test]
    fn a_short_key_is_scrubbed_only_in_its_bearer_form() {
        assert_eq!(
            text("x marks the spot; BEARER x, bearer xy", Some("x")),
            "x marks the spot; BEARER ***, bearer ***y"
        );
        assert_eq!(text("no key", None), "no key");
        assert_eq!(text("é bearer x é", Some("x")), "é bearer *** é");
    }
}
