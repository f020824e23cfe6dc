//! Claims: validating the `CLAIM:` lines of a reply against what the ledger says, one verdict
//! per claim, with the evidence for a failure (SPEC §4, FORMATS.md §4); and the other pure
//! decisions a turn makes from its markers: identity adoption ([`adoptions`]), the turn-delta
//! reflection ([`delta_reflection_text`]) and what a `REF:` asks for and its verdict
//! ([`parse_ref`], [`RefOutcome`]; the turn reads the target).
//!
//! Unlike the reference, every claim gets a verdict and none aborts the turn (FORMATS.md §17
//! items 10–12): data of the wrong shape is [`ClaimFailure::InvalidData`], a well-formed claim
//! that is false is [`ClaimFailure::NotFound`], and a type pmm does not check is
//! [`ClaimFailure::Unsupported`] (the reference accepted any unknown type as valid, so two
//! arbitrary lines could adopt an identity).
//!
//! Integer arguments (`id`, `evidence_events`) are read with Python `int()` semantics, as the
//! reference reads them: integers as they are, floats truncated toward zero (`1.9` → 1),
//! `true`/`false` → 1/0, strings of decimal digits with optional sign, surrounding whitespace
//! and single underscores between digits (`"12"`, `" -3 "`, `"1_000"`). Only ASCII digits are
//! accepted (Python also takes other Unicode decimal digits). Anything else (`"abc"`, `"12.0"`,
//! `null`, lists, objects) is invalid data rather than the reference's uncaught exception.

mod delta;
mod identity;
mod reference;

pub use delta::{delta_reflection_text, delta_text, FailedClaim};
pub use identity::adoptions;
pub use reference::{parse_ref, RefLookup, RefOutcome, RefRequest};

use crate::canon;
use crate::marker::{py_strip, ClaimMarker, ClaimParseError, Line};
use serde_json::{Map, Value};

/// The claim types pmm checks; any other type fails as [`ClaimFailure::Unsupported`].
pub const SUPPORTED_TYPES: [&str; 6] = [
    "event_existence",
    "commitment_status",
    "reference",
    "name_change",
    "identity_proposal",
    "identity_ratify",
];

/// What a claim is checked against. The turn implements it over the ledger and its
/// projections as they stand before the turn's own events are written.
pub trait ClaimContext {
    /// Whether an event with this id is in the ledger.
    fn event_exists(&self, id: i64) -> bool;

    /// Whether the commitment with this cid is open now.
    fn commitment_is_open(&self, cid: &str) -> bool;

    /// Whether a commitment with this cid was ever opened (open or closed now), or `None` when
    /// the context cannot tell. With `Some(false)`, a claim that an unknown cid is closed
    /// fails (the reference counts it valid: "not open" is all it checks), and failure
    /// messages can say "closed" or "does not exist" instead of "not open".
    fn commitment_was_opened(&self, cid: &str) -> Option<bool> {
        let _ = cid;
        None
    }
}

/// The outcome of checking one claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The claim holds; the turn records it as a `claim` event.
    Valid,
    /// The claim does not hold, or cannot be checked; it goes into the correction reflection.
    Failed(ClaimFailure),
}

/// Why a claim failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimFailure {
    /// A claim type pmm does not check.
    #[error("unsupported claim type (supported: event_existence, commitment_status, reference, name_change, identity_proposal, identity_ratify)")]
    Unsupported,
    /// The data has the wrong shape for its type, e.g. `{"id":"abc"}`: `id "abc" is not an
    /// integer`.
    #[error("invalid data: {0}")]
    InvalidData(String),
    /// The data is well-formed and the claim is false: `event 999 does not exist`,
    /// `commitment abc is closed`.
    #[error("{0}")]
    NotFound(String),
}

/// Checks one claim against the context. Never panics: every claim gets a verdict.
pub fn validate(claim: &ClaimMarker, ctx: &dyn ClaimContext) -> Verdict {
    let result = match claim.claim_type.as_str() {
        "event_existence" | "reference" => event_claim(&claim.data, ctx),
        "commitment_status" => commitment_claim(&claim.data, ctx),
        "name_change" => object(&claim.data).and_then(|o| nonempty_str(o, "new_name").map(drop)),
        "identity_proposal" => object(&claim.data).and_then(|o| identity_proposal(o, ctx)),
        "identity_ratify" => object(&claim.data).and_then(|o| nonempty_str(o, "token").map(drop)),
        _ => Err(ClaimFailure::Unsupported),
    };
    match result {
        Ok(()) => Verdict::Valid,
        Err(f) => Verdict::Failed(f),
    }
}

/// Validates every claim line of a reply, in reply order: the well-formed valid claims (to be
/// recorded), and every failure, malformed lines included (for the correction reflection).
pub fn check_all<'a>(
    claims: &'a [Line<Result<ClaimMarker, ClaimParseError>>],
    ctx: &dyn ClaimContext,
) -> (Vec<Line<&'a ClaimMarker>>, Vec<FailedClaim>) {
    let mut valid = Vec::new();
    let mut failed = Vec::new();
    for c in claims {
        match &c.value {
            Err(e) => failed.push(FailedClaim::from_parse_error(c.line, e)),
            Ok(claim) => match validate(claim, ctx) {
                Verdict::Valid => valid.push(Line {
                    line: c.line,
                    value: claim,
                }),
                Verdict::Failed(f) => failed.push(FailedClaim::from_failure(c.line, claim, &f)),
            },
        }
    }
    (valid, failed)
}

/// The content of the `claim` event for a claim: `CLAIM:<type>=<canonical JSON of data>`
/// (FORMATS.md §4.2). [`crate::marker::parse`] only yields data that has a canonical form;
/// for hand-built data without one (NaN), the compact serde form is used rather than failing.
pub fn claim_content(claim: &ClaimMarker) -> String {
    let data = canon::to_string(&claim.data)
        .or_else(|_| serde_json::to_string(&claim.data))
        .unwrap_or_default();
    format!("CLAIM:{}={}", claim.claim_type, data)
}

fn object(data: &Value) -> Result<&Map<String, Value>, ClaimFailure> {
    match data {
        Value::Object(o) => Ok(o),
        other => Err(ClaimFailure::InvalidData(format!(
            "data must be a JSON object, not {}",
            canon::type_name(other)
        ))),
    }
}

/// The Python-stripped, non-empty string at `key`.
fn nonempty_str<'a>(o: &'a Map<String, Value>, key: &str) -> Result<&'a str, ClaimFailure> {
    match o.get(key) {
        None => Err(ClaimFailure::InvalidData(format!("missing \"{key}\""))),
        Some(Value::String(s)) if !py_strip(s).is_empty() => Ok(py_strip(s)),
        Some(Value::String(_)) => Err(ClaimFailure::InvalidData(format!("\"{key}\" is empty"))),
        Some(other) => Err(ClaimFailure::InvalidData(format!(
            "\"{key}\" must be a string, not {}",
            canon::type_name(other)
        ))),
    }
}

fn event_claim(data: &Value, ctx: &dyn ClaimContext) -> Result<(), ClaimFailure> {
    let o = object(data)?;
    // The reference defaults a missing id to -1 (never an event); saying what is missing is
    // more use to the model than "event -1 does not exist".
    let id = o
        .get("id")
        .ok_or_else(|| ClaimFailure::InvalidData("missing \"id\"".into()))?;
    event_must_exist(id, "id", ctx)
}

fn event_must_exist(v: &Value, what: &str, ctx: &dyn ClaimContext) -> Result<(), ClaimFailure> {
    match py_int(v) {
        Some(PyInt::Small(id)) if ctx.event_exists(id) => Ok(()),
        Some(PyInt::Small(id)) => Err(ClaimFailure::NotFound(format!("event {id} does not exist"))),
        Some(PyInt::Huge(text)) => Err(ClaimFailure::NotFound(format!(
            "event {text} does not exist"
        ))),
        None => Err(ClaimFailure::InvalidData(format!(
            "{what} {} is not an integer",
            short_json(v)
        ))),
    }
}

fn commitment_claim(data: &Value, ctx: &dyn ClaimContext) -> Result<(), ClaimFailure> {
    let o = object(data)?;
    let cid = match o.get("cid") {
        None => return Err(ClaimFailure::InvalidData("missing \"cid\"".into())),
        Some(Value::String(s)) => py_strip(s).to_string(),
        // str() of a scalar, as the reference; a number's text is its canonical form (Python's
        // repr), so `{"cid":12}` asks about cid "12".
        Some(v @ Value::Number(_)) => {
            canon::to_string(v).map_err(|e| ClaimFailure::InvalidData(format!("\"cid\": {e}")))?
        }
        Some(other) => {
            return Err(ClaimFailure::InvalidData(format!(
                "\"cid\" must be a string, not {}",
                canon::type_name(other)
            )))
        }
    };
    if cid.is_empty() {
        return Err(ClaimFailure::InvalidData("\"cid\" is empty".into()));
    }
    let expected = match o.get("open") {
        None => true,
        Some(v) => open_flag(v).ok_or_else(|| {
            ClaimFailure::InvalidData(format!(
                "\"open\" must be true or false, not {}",
                short_json(v)
            ))
        })?,
    };
    let open = ctx.commitment_is_open(&cid);
    let opened = ctx.commitment_was_opened(&cid);
    match (expected, open, opened) {
        (true, true, _) => Ok(()),
        (false, false, Some(false)) | (true, false, Some(false)) => Err(ClaimFailure::NotFound(
            format!("commitment {cid} does not exist"),
        )),
        (false, false, _) => Ok(()),
        (true, false, Some(true)) => Err(ClaimFailure::NotFound(format!(
            "commitment {cid} is closed"
        ))),
        (true, false, None) => Err(ClaimFailure::NotFound(format!(
            "commitment {cid} is not open"
        ))),
        (false, true, _) => Err(ClaimFailure::NotFound(format!("commitment {cid} is open"))),
    }
}

/// The `open` flag: a boolean, or the spellings models use for one (`0`/`1`, `"true"`,
/// `"false"`). The reference takes Python truthiness, under which `"false"` means open.
fn open_flag(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(_) => match py_int(v) {
            Some(PyInt::Small(0)) => Some(false),
            Some(PyInt::Small(1)) => Some(true),
            _ => None,
        },
        Value::String(s) => match py_strip(s).to_ascii_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

fn identity_proposal(o: &Map<String, Value>, ctx: &dyn ClaimContext) -> Result<(), ClaimFailure> {
    nonempty_str(o, "token")?;
    match o.get("evidence_events") {
        None | Some(Value::Null) => Ok(()),
        // Evidence is checked like an event_existence claim: citing an event that is not there
        // makes the proposal false.
        Some(Value::Array(ids)) => ids
            .iter()
            .try_for_each(|id| event_must_exist(id, "evidence event", ctx)),
        Some(other) => Err(ClaimFailure::InvalidData(format!(
            "\"evidence_events\" must be a list of event ids, not {}",
            canon::type_name(other)
        ))),
    }
}

/// An integer read with Python `int()` semantics.
#[derive(Debug, PartialEq, Eq)]
enum PyInt {
    /// It fits an event id.
    Small(i64),
    /// A valid integer beyond i64 (no event has it), as decimal text.
    Huge(String),
}

/// Python `int(v)` for a JSON value, or `None` where Python raises (see the module
/// documentation).
fn py_int(v: &Value) -> Option<PyInt> {
    match v {
        Value::Bool(b) => Some(PyInt::Small(i64::from(*b))),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                return Some(PyInt::Small(i));
            }
            // With arbitrary_precision the number is its text: an integer literal that does
            // not fit i64 is still an integer.
            let text = n.to_string();
            if !text.contains(['.', 'e', 'E']) {
                return Some(PyInt::Huge(text));
            }
            let t = n.as_f64()?.trunc();
            if !t.is_finite() {
                return None;
            }
            // -2^63..2^63 are the integral floats that fit i64 (both bounds are exact floats).
            const TWO_63: f64 = 9_223_372_036_854_775_808.0;
            if (-TWO_63..TWO_63).contains(&t) {
                Some(PyInt::Small(t as i64))
            } else {
                Some(PyInt::Huge(format!("{t:.0}")))
            }
        }
        Value::String(s) => py_int_str(s),
        _ => None,
    }
}

/// Python `int(s)` for a string, ASCII digits only.
fn py_int_str(s: &str) -> Option<PyInt> {
    let t = py_strip(s);
    let (neg, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    // Single underscores between digits only: "1_000" but not "_1", "1_", "1__0".
    let ok = !digits.is_empty()
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__")
        && digits.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    if !ok {
        return None;
    }
    let mut plain: String = digits.chars().filter(|&c| c != '_').collect();
    let trimmed = plain.trim_start_matches('0');
    plain = if trimmed.is_empty() {
        "0".into()
    } else {
        trimmed.into()
    };
    if neg && plain != "0" {
        plain.insert(0, '-');
    }
    Some(match plain.parse::<i64>() {
        Ok(i) => PyInt::Small(i),
        Err(_) => PyInt::Huge(plain),
    })
}

/// A value for a message: its JSON, cut at 40 characters.
fn short_json(v: &Value) -> String {
    let text = serde_json::to_string(v).unwrap_or_default();
    delta::truncate(&text, 40)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::marker::parse;
    use serde_json::json;

    /// Events 1..=10 exist; commitment `aaaa1111` is open, `bbbb2222` was opened and closed.
    struct Ledger {
        knows_history: bool,
    }

    impl ClaimContext for Ledger {
        fn event_exists(&self, id: i64) -> bool {
            (1..=10).contains(&id)
        }
        fn commitment_is_open(&self, cid: &str) -> bool {
            cid == "aaaa1111"
        }
        fn commitment_was_opened(&self, cid: &str) -> Option<bool> {
            self.knows_history
                .then(|| ["aaaa1111", "bbbb2222"].contains(&cid))
        }
    }

    const CTX: Ledger = Ledger {
        knows_history: true,
    };

    fn claim(t: &str, data: Value) -> ClaimMarker {
        ClaimMarker {
            claim_type: t.into(),
            raw: format!("CLAIM:{t}={data}"),
            data,
        }
    }

    fn verdict(t: &str, data: Value) -> Verdict {
        validate(&claim(t, data), &CTX)
    }

    fn invalid(t: &str, data: Value) -> String {
        match verdict(t, data) {
            Verdict::Failed(ClaimFailure::InvalidData(m)) => m,
            v => panic!("expected InvalidData, got {v:?}"),
        }
    }

    fn not_found(t: &str, data: Value) -> String {
        match verdict(t, data) {
            Verdict::Failed(ClaimFailure::NotFound(m)) => m,
            v => panic!("expected NotFound, got {v:?}"),
        }
    }

    #[test]
    fn event_existence_reads_ids_like_python_int() {
        for t in ["event_existence", "reference"] {
            assert_eq!(verdict(t, json!({"id": 3})), Verdict::Valid);
            assert_eq!(
                verdict(t, json!({"id": "12"})),
                Verdict::Failed(ClaimFailure::NotFound("event 12 does not exist".into()))
            );
            assert_eq!(verdict(t, json!({"id": " 7 "})), Verdict::Valid);
            assert_eq!(verdict(t, json!({"id": "+1_0"})), Verdict::Valid);
            assert_eq!(verdict(t, json!({"id": 1.9})), Verdict::Valid); // int(1.9) == 1
            assert_eq!(verdict(t, json!({"id": true})), Verdict::Valid); // int(True) == 1
            assert_eq!(not_found(t, json!({"id": 999})), "event 999 does not exist");
            assert_eq!(not_found(t, json!({"id": false})), "event 0 does not exist");
            assert_eq!(not_found(t, json!({"id": -0.5})), "event 0 does not exist");
            assert_eq!(
                invalid(t, json!({"id": "abc"})),
                "id \"abc\" is not an integer"
            );
            assert_eq!(
                invalid(t, json!({"id": "12.0"})),
                "id \"12.0\" is not an integer"
            );
            assert_eq!(
                invalid(t, json!({"id": "1__0"})),
                "id \"1__0\" is not an integer"
            );
            assert_eq!(invalid(t, json!({"id": null})), "id null is not an integer");
            assert_eq!(invalid(t, json!({"id": [1]})), "id [1] is not an integer");
            assert_eq!(invalid(t, json!({})), "missing \"id\"");
            assert_eq!(
                invalid(t, json!(3)),
                "data must be a JSON object, not a number"
            );
            assert_eq!(
                invalid(t, json!("x")),
                "data must be a JSON object, not a string"
            );
            assert_eq!(
                invalid(t, json!([1])),
                "data must be a JSON object, not an array"
            );
        }
    }

    #[test]
    fn huge_ids_are_integers_that_no_event_has() {
        let m = parse("CLAIM:event_existence={\"id\":123456789012345678901234567890}\nCLAIM:event_existence={\"id\":1e30}\nCLAIM:event_existence={\"id\":\"-99999999999999999999\"}");
        let got: Vec<String> = m
            .claims
            .iter()
            .map(|c| match validate(c.value.as_ref().unwrap(), &CTX) {
                Verdict::Failed(ClaimFailure::NotFound(s)) => s,
                v => panic!("{v:?}"),
            })
            .collect();
        assert_eq!(
            got,
            [
                "event 123456789012345678901234567890 does not exist",
                "event 1000000000000000019884624838656 does not exist",
                "event -99999999999999999999 does not exist",
            ]
        );
    }

    #[test]
    fn commitment_status_compares_open_state() {
        let t = "commitment_status";
        assert_eq!(verdict(t, json!({"cid": "aaaa1111"})), Verdict::Valid);
        assert_eq!(
            verdict(t, json!({"cid": " aaaa1111 ", "open": true})),
            Verdict::Valid
        );
        assert_eq!(
            verdict(t, json!({"cid": "bbbb2222", "open": false})),
            Verdict::Valid
        );
        assert_eq!(
            verdict(t, json!({"cid": "bbbb2222", "open": "false"})),
            Verdict::Valid
        );
        assert_eq!(
            verdict(t, json!({"cid": "bbbb2222", "open": 0})),
            Verdict::Valid
        );
        assert_eq!(
            not_found(t, json!({"cid": "bbbb2222"})),
            "commitment bbbb2222 is closed"
        );
        assert_eq!(
            not_found(t, json!({"cid": "aaaa1111", "open": false})),
            "commitment aaaa1111 is open"
        );
        // Unknown cids: neither open nor closed.
        assert_eq!(
            not_found(t, json!({"cid": "cccc3333"})),
            "commitment cccc3333 does not exist"
        );
        assert_eq!(
            not_found(t, json!({"cid": "cccc3333", "open": false})),
            "commitment cccc3333 does not exist"
        );
        assert_eq!(
            not_found(t, json!({"cid": 12})),
            "commitment 12 does not exist"
        );
        assert_eq!(invalid(t, json!({"open": true})), "missing \"cid\"");
        assert_eq!(invalid(t, json!({"cid": ""})), "\"cid\" is empty");
        assert_eq!(
            invalid(t, json!({"cid": null})),
            "\"cid\" must be a string, not null"
        );
        assert_eq!(
            invalid(t, json!({"cid": "aaaa1111", "open": "maybe"})),
            "\"open\" must be true or false, not \"maybe\""
        );
        assert_eq!(
            invalid(t, json!(["aaaa1111"])),
            "data must be a JSON object, not an array"
        );
    }

    #[test]
    fn commitment_status_without_history_follows_the_reference() {
        let ctx = Ledger {
            knows_history: false,
        };
        let c = claim(
            "commitment_status",
            json!({"cid": "cccc3333", "open": false}),
        );
        assert_eq!(validate(&c, &ctx), Verdict::Valid);
        let c = claim("commitment_status", json!({"cid": "bbbb2222"}));
        assert_eq!(
            validate(&c, &ctx),
            Verdict::Failed(ClaimFailure::NotFound(
                "commitment bbbb2222 is not open".into()
            ))
        );
    }

    #[test]
    fn name_change_needs_a_nonempty_name() {
        let t = "name_change";
        assert_eq!(verdict(t, json!({"new_name": "Echo"})), Verdict::Valid);
        assert_eq!(
            invalid(t, json!({"new_name": "  "})),
            "\"new_name\" is empty"
        );
        assert_eq!(
            invalid(t, json!({"new_name": 5})),
            "\"new_name\" must be a string, not a number"
        );
        assert_eq!(invalid(t, json!({"name": "Echo"})), "missing \"new_name\"");
        assert_eq!(
            invalid(t, json!("Echo")),
            "data must be a JSON object, not a string"
        );
    }

    #[test]
    fn identity_claims_need_a_token_and_real_evidence() {
        assert_eq!(
            verdict("identity_proposal", json!({"token": "Echo"})),
            Verdict::Valid
        );
        assert_eq!(
            verdict(
                "identity_proposal",
                json!({"token": "Echo", "description": "d", "evidence_events": [1, "2"]})
            ),
            Verdict::Valid
        );
        assert_eq!(
            not_found(
                "identity_proposal",
                json!({"token": "Echo", "evidence_events": [1, 99]})
            ),
            "event 99 does not exist"
        );
        assert_eq!(
            invalid(
                "identity_proposal",
                json!({"token": "Echo", "evidence_events": ["x"]})
            ),
            "evidence event \"x\" is not an integer"
        );
        assert_eq!(
            invalid(
                "identity_proposal",
                json!({"token": "Echo", "evidence_events": 3})
            ),
            "\"evidence_events\" must be a list of event ids, not a number"
        );
        assert_eq!(
            invalid("identity_proposal", json!({"token": ""})),
            "\"token\" is empty"
        );
        assert_eq!(
            verdict("identity_ratify", json!({"token": "Echo"})),
            Verdict::Valid
        );
        assert_eq!(invalid("identity_ratify", json!({})), "missing \"token\"");
        assert_eq!(
            invalid("identity_ratify", json!(null)),
            "data must be a JSON object, not null"
        );
    }

    #[test]
    fn unknown_types_are_unsupported_not_valid() {
        for t in ["intent", "", "Event_Existence", "identity"] {
            assert_eq!(
                verdict(t, json!({"id": 1})),
                Verdict::Failed(ClaimFailure::Unsupported)
            );
        }
        assert!(ClaimFailure::Unsupported
            .to_string()
            .starts_with("unsupported claim type"));
    }

    #[test]
    fn every_claim_line_gets_a_verdict() {
        let reply = "Sure.\nCLAIM:event_existence={\"id\":1}\nCLAIM: {\"intent\":\"x\"}\nCLAIM:event_existence={\"id\":\"abc\"}\nCLAIM:intent=reflection,outcome=ok\nCLAIM:mood={\"x\":1}\n  CLAIM:reference={\"id\": 2}";
        let m = parse(reply);
        let (valid, failed) = check_all(&m.claims, &CTX);
        assert_eq!(valid.iter().map(|l| l.line).collect::<Vec<_>>(), [2, 7]);
        assert_eq!(
            failed
                .iter()
                .map(|f| (f.line, f.label.as_str()))
                .collect::<Vec<_>>(),
            [
                (Some(3), "malformed"),
                (Some(4), "event_existence"),
                (Some(5), "intent"),
                (Some(6), "mood")
            ]
        );
        assert_eq!(
            failed[1].reason,
            "invalid data: id \"abc\" is not an integer"
        );
    }

    #[test]
    fn claim_content_is_canonical() {
        let m = parse("CLAIM: event_existence = { \"id\" : 1, \"b\": \"é\", \"a\": 1.50 }");
        let c = m.claims[0].value.as_ref().unwrap();
        assert_eq!(
            claim_content(c),
            r#"CLAIM:event_existence={"a":1.5,"b":"\u00e9","id":1}"#
        );
    }
}
