//! Events, kinds, timestamps and the JSONL wire form. Pure data: no I/O.

pub mod config;
pub mod erasure;
mod kind;
pub(crate) mod vocab;

pub use kind::{Kind, OtherKind, UnknownKind, MESSAGES, MESSAGE_KINDS};
pub use vocab::{Action, Source};

use crate::canon;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};

/// Every kind pmm may append, sorted by name, for help and error messages.
pub fn all_kinds() -> Vec<&'static str> {
    let mut all: Vec<&str> = Kind::ALL.iter().map(Kind::as_str).collect();
    all.sort_unstable();
    all
}

/// One stored event, exactly as the ledger holds it. `meta` is the stored text (canonical JSON
/// of the meta object for everything we write; kept verbatim for imports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// 1-based, rising by one.
    pub id: i64,
    /// UTC `YYYY-MM-DDTHH:MM:SS.ffffffZ`; not hashed.
    pub ts: String,
    /// A known kind for anything we write; readers accept any name ([`Kind::Other`]).
    pub kind: Kind,
    /// Always a string.
    pub content: String,
    /// The stored meta text.
    pub meta: String,
    /// The previous event's hash; `None` for the first event.
    pub prev_hash: Option<String>,
    /// This event's hash (the schema allows NULL; verification reports it).
    pub hash: Option<String>,
}

impl Event {
    /// Whether the row is blank, as an erasure leaves it (no content, meta `{}`): nothing of
    /// it may be recalled.
    pub fn is_blank(&self) -> bool {
        self.content.is_empty() && self.meta == "{}"
    }

    /// Appends the JSONL wire form (`meta` as an object) without the trailing newline.
    pub fn write_jsonl(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"id\":");
        out.extend_from_slice(self.id.to_string().as_bytes());
        out.extend_from_slice(b",\"ts\":");
        json_str(out, &self.ts);
        out.extend_from_slice(b",\"kind\":");
        json_str(out, self.kind.as_str());
        out.extend_from_slice(b",\"content\":");
        json_str(out, &self.content);
        out.extend_from_slice(b",\"meta\":");
        let meta = self.meta.trim();
        if meta.is_empty() {
            out.extend_from_slice(b"{}");
        } else if meta.contains(['\n', '\r']) {
            // A stored meta text may be pretty-printed (a reference export's string meta is
            // kept verbatim). JSON text has raw line breaks only as white space (inside a
            // string they must be escaped), so they become spaces: the event stays on one
            // line and the value is unchanged.
            out.extend(
                meta.bytes()
                    .map(|b| if b == b'\n' || b == b'\r' { b' ' } else { b }),
            );
        } else {
            out.extend_from_slice(meta.as_bytes());
        }
        out.extend_from_slice(b",\"prev_hash\":");
        opt_str(out, self.prev_hash.as_deref());
        out.extend_from_slice(b",\"hash\":");
        opt_str(out, self.hash.as_deref());
        out.push(b'}');
    }

    /// The wire form as a string (one JSONL line without the newline).
    pub fn to_jsonl(&self) -> String {
        let mut out = Vec::with_capacity(256 + self.content.len() + self.meta.len());
        self.write_jsonl(&mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// Parses the stored meta text (empty text counts as `{}`, as the reference reads it).
    pub fn meta_map(&self) -> Result<Map<String, Value>, canon::MetaError> {
        if self.meta.trim().is_empty() {
            return Ok(Map::new());
        }
        canon::parse_meta(&self.meta)
    }
}

/// An event on its way through several folds (the projections, `--deep`'s checks): its meta is
/// parsed when the first of them asks for it, and only once, instead of once per fold.
#[derive(Debug)]
pub struct Seen<'a> {
    /// The event.
    pub ev: &'a Event,
    /// The meta a reader had already parsed, if any.
    given: Option<&'a Map<String, Value>>,
    /// The stored meta parsed: `None` when it is not a JSON object.
    object: std::cell::OnceCell<Option<Map<String, Value>>>,
    /// Whether that object has a canonical form (as [`Event::meta_map`] requires).
    canonical: std::cell::OnceCell<bool>,
}

/// The meta of an event whose meta does not read: `{}`.
static NO_META: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl<'a> Seen<'a> {
    /// `ev`, its meta not parsed yet.
    pub fn new(ev: &'a Event) -> Self {
        Seen {
            ev,
            given: None,
            object: std::cell::OnceCell::new(),
            canonical: std::cell::OnceCell::new(),
        }
    }

    /// `ev` with its meta as a reader parsed it (`None`: parse it when asked).
    pub fn with_meta(ev: &'a Event, meta: Option<&'a Map<String, Value>>) -> Self {
        Seen {
            given: meta,
            ..Seen::new(ev)
        }
    }

    /// The meta when it is a JSON object, canonical or not (empty text reads as `{}`).
    pub fn meta_object(&self) -> Option<&Map<String, Value>> {
        if let Some(m) = self.given {
            return Some(m);
        }
        self.object
            .get_or_init(|| match self.ev.meta.trim().is_empty() {
                true => Some(Map::new()),
                false => serde_json::from_str(&self.ev.meta).ok(),
            })
            .as_ref()
    }

    /// The meta as [`Event::meta_map`] reads it: `None` when it is not a JSON object with a
    /// canonical form.
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        let m = self.meta_object()?;
        let canonical = self.given.is_some()
            || *self
                .canonical
                .get_or_init(|| canon::write_object(&mut Vec::new(), m).is_ok());
        canonical.then_some(m)
    }

    /// [`Seen::meta`], or `{}` when it does not read (`meta_map().unwrap_or_default()`).
    pub fn meta_or_empty(&self) -> &Map<String, Value> {
        self.meta().unwrap_or(&NO_META)
    }
}

#[cfg(test)]
impl Event {
    /// A hand-made event for unit tests: no timestamp, no links, no hash.
    pub(crate) fn sample(id: i64, kind: &str, content: &str, meta: &str) -> Event {
        Event {
            id,
            ts: String::new(),
            kind: kind.into(),
            content: content.into(),
            meta: meta.into(),
            prev_hash: None,
            hash: None,
        }
    }
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    // serde_json's string escaping: minimal escapes, raw UTF-8. Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => json_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// An event to be appended: validated kind, string content, meta object.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// A known kind.
    pub kind: Kind,
    /// The content.
    pub content: String,
    /// The meta object.
    pub meta: Map<String, Value>,
}

impl NewEvent {
    /// Builds a new event after checking the kind and the meta.
    pub fn new(
        kind: Kind,
        content: impl Into<String>,
        meta: Map<String, Value>,
    ) -> Result<Self, EventError> {
        if let Kind::Other(_) = kind {
            return Err(EventError::UnknownKind(kind.to_string()));
        }
        let meta = canon::into_meta(Value::Object(meta))?;
        Ok(NewEvent {
            kind,
            content: content.into(),
            meta,
        })
    }

    /// `meta.source` if it is a non-empty string, else `unknown` — the policy's actor.
    pub fn actor(&self) -> String {
        match self.meta.get("source") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(v) if truthy(v) => canon::to_string(v).unwrap_or_else(|_| "unknown".into()),
            _ => "unknown".into(),
        }
    }

    /// Parses one input line `{"kind","content","meta"?}`. Other fields (`id`, `hash`, … as
    /// `pmm-replay` prints them) are ignored, so events can be copied between ledgers.
    pub fn from_json_line(line: &str) -> Result<Self, EventError> {
        if line.trim().is_empty() {
            return Err(EventError::EmptyLine);
        }
        let v: Value = serde_json::from_str(line)
            .map_err(|e| EventError::NotJson(canon::explain_json_error(line, &e)))?;
        let Value::Object(mut obj) = v else {
            return Err(EventError::NotAnObject(canon::type_name(&v)));
        };
        let kind: Kind = match obj.remove("kind") {
            Some(Value::String(k)) => k
                .parse()
                .map_err(|e: UnknownKind| EventError::UnknownKind(e.0))?,
            Some(other) => return Err(EventError::not_a_string("kind", &other)),
            None => return Err(EventError::Missing("kind")),
        };
        let content = match obj.remove("content") {
            Some(Value::String(c)) => c,
            Some(other) => return Err(EventError::not_a_string("content", &other)),
            None => return Err(EventError::Missing("content")),
        };
        let meta = match obj.remove("meta") {
            None => Map::new(),
            Some(v) => canon::into_meta(v)?,
        };
        Ok(NewEvent {
            kind,
            content,
            meta,
        })
    }
}

/// Why an event cannot be appended as given, or a time cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// A kind outside the allowlist.
    #[error("unknown kind '{0}' (`pmm-append --list-kinds` lists the {n} allowed kinds)", n = Kind::ALL.len())]
    UnknownKind(String),
    /// An input line with nothing on it.
    #[error("empty line: expected a JSON object {{\"kind\",\"content\",\"meta\"?}}")]
    EmptyLine,
    /// An input line that is not JSON (explained in the user's terms).
    #[error("{0}")]
    NotJson(String),
    /// An input line that is JSON but not an object; the type it is.
    #[error("expected a JSON object {{\"kind\",\"content\",\"meta\"?}}, got {0}")]
    NotAnObject(&'static str),
    /// A field that must be a string and is not.
    #[error("\"{field}\" must be a string, not {found}")]
    NotAString {
        /// The field.
        field: &'static str,
        /// The JSON type it has.
        found: &'static str,
    },
    /// A field that must be there.
    #[error("missing \"{0}\"")]
    Missing(&'static str),
    /// A meta that is not a JSON object, or has no canonical form.
    #[error(transparent)]
    Meta(#[from] canon::MetaError),
    /// `--now`/`$PMM_NOW` that is not an RFC 3339 time.
    #[error("--now/PMM_NOW: '{text}' is not an RFC 3339 time ({source})")]
    BadTime {
        /// The text given.
        text: String,
        /// Why it does not parse.
        source: chrono::ParseError,
    },
}

impl EventError {
    fn not_a_string(field: &'static str, v: &Value) -> Self {
        EventError::NotAString {
            field,
            found: canon::type_name(v),
        }
    }
}

// Python truthiness: the one definition, in `pystr`.
use crate::pystr::truthy;

/// Checks a kind's name against the kinds pmm may append.
pub fn check_kind(kind: &str) -> Result<(), EventError> {
    kind.parse::<Kind>()
        .map(drop)
        .map_err(|e| EventError::UnknownKind(e.0))
}

/// Where timestamps come from: the system clock, or a pinned instant (`--now`, `$PMM_NOW`) so
/// that tests and demos are reproducible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The wall clock.
    System,
    /// Always this instant.
    Pinned(DateTime<Utc>),
}

impl Clock {
    /// Parses an RFC 3339 time (`2025-11-24T05:55:41Z`, `…+01:00`, fractions allowed).
    pub fn pinned(text: &str) -> Result<Clock, EventError> {
        DateTime::parse_from_rfc3339(text.trim())
            .map(|t| Clock::Pinned(t.with_timezone(&Utc)))
            .map_err(|source| EventError::BadTime {
                text: text.to_string(),
                source,
            })
    }

    /// The current instant.
    pub fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::System => Utc::now(),
            Clock::Pinned(t) => *t,
        }
    }

    /// The current instant in the ledger's `ts` format.
    pub fn ts(&self) -> String {
        format_ts(self.now())
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ`, the reference's timestamp format.
pub fn format_ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_reads_the_meta_as_meta_map_does() {
        for meta in [
            "",
            "  ",
            "{}",
            r#"{"a":1}"#,
            r#"{"a":1e400}"#,
            "[1]",
            "{",
            r#"{"a":1,"a":2}"#,
        ] {
            let ev = Event::sample(1, "reflection", "", meta);
            let seen = Seen::new(&ev);
            assert_eq!(seen.meta(), ev.meta_map().ok().as_ref(), "{meta}");
            assert_eq!(*seen.meta_or_empty(), ev.meta_map().unwrap_or_default());
        }
        // Not canonical (a float out of range) but an object: the event graph still reads it.
        let ev = Event::sample(1, "reflection", "", r#"{"about_event":1e400}"#);
        assert!(Seen::new(&ev).meta_object().is_some());
        let given = Map::from_iter([("a".to_string(), Value::from(2))]);
        let ev = Event::sample(1, "reflection", "", r#"{"a":1}"#);
        assert_eq!(Seen::with_meta(&ev, Some(&given)).meta(), Some(&given));
    }

    #[test]
    fn kinds_are_forty_two_and_unique() {
        let all = all_kinds();
        assert_eq!(all.len(), 42);
        let mut dedup = all.clone();
        dedup.dedup();
        assert_eq!(dedup.len(), all.len());
        assert!(all.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn ts_format_matches_reference() {
        let c = Clock::pinned("2025-11-24T06:55:41.194157+01:00").unwrap();
        assert_eq!(c.ts(), "2025-11-24T05:55:41.194157Z");
        assert_eq!(
            Clock::pinned("2025-01-01T00:00:00Z").unwrap().ts(),
            "2025-01-01T00:00:00.000000Z"
        );
        assert!(Clock::pinned("yesterday").is_err());
    }

    #[test]
    fn input_lines_are_validated() {
        let ok = NewEvent::from_json_line(
            r#"{"kind":"user_message","content":"hi","meta":{"role":"user"},"id":9}"#,
        )
        .unwrap();
        assert_eq!(ok.kind, Kind::UserMessage);
        for (line, needle) in [
            ("", "empty line"),
            ("nope", "not valid JSON"),
            (r#"{"kind":"bogus","content":""}"#, "unknown kind 'bogus'"),
            (
                r#"{"kind":"user_message","content":5}"#,
                "\"content\" must be a string",
            ),
            (
                r#"{"kind":"user_message","content":"x","meta":[]}"#,
                "meta must be a JSON object",
            ),
            (
                r#"{"kind":"user_message","content":"x","meta":{"a":NaN}}"#,
                "NaN",
            ),
            (r#"{"kind":"user_message","content":"\ud800"}"#, "surrogate"),
            (r#"[1]"#, "expected a JSON object"),
        ] {
            let err = NewEvent::from_json_line(line).unwrap_err().to_string();
            assert!(err.contains(needle), "{line:?}: {err}");
        }
    }

    #[test]
    fn event_errors_are_typed_and_read_as_before() {
        let err = |line: &str| NewEvent::from_json_line(line).unwrap_err();
        assert_eq!(err(" "), EventError::EmptyLine);
        assert_eq!(
            err(" ").to_string(),
            "empty line: expected a JSON object {\"kind\",\"content\",\"meta\"?}"
        );
        assert_eq!(
            err("[1]").to_string(),
            "expected a JSON object {\"kind\",\"content\",\"meta\"?}, got an array"
        );
        assert_eq!(err(r#"{"content":""}"#), EventError::Missing("kind"));
        assert_eq!(err(r#"{"content":""}"#).to_string(), "missing \"kind\"");
        assert_eq!(
            err(r#"{"kind":1,"content":""}"#).to_string(),
            "\"kind\" must be a string, not a number"
        );
        assert_eq!(
            err(r#"{"kind":"bogus","content":""}"#).to_string(),
            format!(
                "unknown kind 'bogus' (`pmm-append --list-kinds` lists the {} allowed kinds)",
                Kind::ALL.len()
            )
        );
        assert!(matches!(
            NewEvent::new(Kind::from("x"), "", Map::new()),
            Err(EventError::UnknownKind(k)) if k == "x"
        ));
        let bad = Clock::pinned("yesterday").unwrap_err();
        assert!(matches!(&bad, EventError::BadTime { text, .. } if text == "yesterday"));
        assert!(bad
            .to_string()
            .starts_with("--now/PMM_NOW: 'yesterday' is not an RFC 3339 time ("));
    }

    #[test]
    fn actor_is_source_or_unknown() {
        let e = |m: &str| {
            NewEvent::from_json_line(&format!(r#"{{"kind":"config","content":"","meta":{m}}}"#))
                .unwrap()
                .actor()
        };
        assert_eq!(e(r#"{"source":"cli"}"#), "cli");
        assert_eq!(e(r#"{"source":""}"#), "unknown");
        assert_eq!(e(r#"{}"#), "unknown");
    }
}
