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

/// Where the key occurs in `raw` as [`text`] would replace it: `(start, end)` byte ranges.
fn occurrences(raw: &str, key: &str) -> Vec<(usize, usize)> {
    if key.chars().count() >= MIN_SCRUBBED {
        raw.match_indices(key)
            .map(|(i, m)| (i, i + m.len()))
            .collect()
    } else {
        let lower = raw.to_ascii_lowercase();
        let needle = format!("bearer {}", key.to_ascii_lowercase());
        lower
            .match_indices(&needle)
            .map(|(i, _)| (i, i + needle.len()))
            .collect()
    }
}

/// A streamed reply, scrubbed as it is shown: what [`Holdback::push`] returns never holds
/// the key, even when the key arrives split over several pieces (a model echoes it token by
/// token). It holds back just enough of the end to see a key that has not finished arriving.
pub(crate) struct Holdback {
    secret: Option<String>,
    raw: String,
    shown: usize,
}

impl Holdback {
    /// A holdback for `secret` (none: every piece passes as it is).
    pub(crate) fn new(secret: Option<&str>) -> Holdback {
        Holdback {
            secret: secret.filter(|k| !k.is_empty()).map(str::to_string),
            raw: String::new(),
            shown: 0,
        }
    }

    /// Takes one piece; returns what can be shown now.
    pub(crate) fn push(&mut self, piece: &str) -> String {
        self.raw.push_str(piece);
        let Some(key) = self.secret.as_deref() else {
            self.shown = self.raw.len();
            return piece.to_string();
        };
        let longest = if key.chars().count() >= MIN_SCRUBBED {
            key.len()
        } else {
            "bearer ".len() + key.len()
        };
        let mut end = self.raw.len().saturating_sub(longest - 1);
        for (start, stop) in occurrences(&self.raw, key) {
            if start < end && stop > end {
                end = start;
            }
        }
        while !self.raw.is_char_boundary(end) {
            end -= 1;
        }
        if end <= self.shown {
            return String::new();
        }
        let out = text(&self.raw[self.shown..end], Some(key));
        self.shown = end;
        out
    }

    /// What is left to show once the stream has ended.
    pub(crate) fn finish(&mut self) -> String {
        let out = text(&self.raw[self.shown..], self.secret.as_deref());
        self.shown = self.raw.len();
        out
    }
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

#[cfg(test)]
mod holdback_tests {
    use super::*;

    #[test]
    fn a_key_split_over_pieces_is_never_shown() {
        let key = "sk-live-0123456789";
        for cut in [1, 3, 7, 12] {
            let reply = format!("Your key is {key}, keep it.");
            let mut h = Holdback::new(Some(key));
            let mut shown = String::new();
            for piece in reply.as_bytes().chunks(cut) {
                shown.push_str(&h.push(std::str::from_utf8(piece).unwrap()));
                assert!(!shown.contains(&key[..key.len() - 1]), "{shown}");
            }
            shown.push_str(&h.finish());
            assert_eq!(shown, "Your key is ***, keep it.");
        }
        let mut none = Holdback::new(None);
        assert_eq!(none.push("abc"), "abc");
        assert_eq!(none.finish(), "");
    }
}
