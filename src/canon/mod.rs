//! Canonical JSON, byte-identical to CPython's
//! `json.dumps(obj, sort_keys=True, separators=(",", ":"))` — the one definition of the JSON
//! text that gets hashed (SPEC §2.3, FORMATS.md §1.3): an event's payload
//! ([`write_event_payload`]), and the strings and floats that the other hashed JSON (the
//! retrieval digest's payload, embedding contents) is built from. What is hashed without being
//! JSON (slot ids, embedding token vectors, Merkle nodes) is made where it is defined. Also the
//! checks on `meta` text ([`parse_meta`]): a `meta` that has no canonical form is refused before
//! it is written.
//!
//! What that means, precisely:
//! - output is ASCII: `"` `\` and the short escapes `\n \r \t \b \f`; every other character
//!   outside U+0020..U+007E as `\uXXXX` with lowercase hex (so DEL is `\u007f`), characters above
//!   U+FFFF as a UTF-16 surrogate pair; `/` is not escaped;
//! - object keys sorted by code point (which is UTF-8 byte order, what `serde_json::Map` keeps);
//! - integers of any size kept exactly as written (`-0` becomes `0`, as `int("-0")` does);
//! - floats as CPython's `repr`: the shortest digits that round-trip (the nearest such string,
//!   ties to even), positional when `1e-4 <= |x| < 1e16` (always with a fractional part,
//!   `100.0`), otherwise `1e-05`, `1.5e+16`.
//!
//! Values come from `serde_json` built with `arbitrary_precision`, so a number arrives here as the
//! text it was written with and nothing is lost on the way. Input CPython could not have produced
//! is refused: NaN and Infinity (the parser rejects them, and [`write()`] rejects numbers that
//! overflow to infinity), lone surrogates (the parser rejects them). One known divergence: an
//! object keyed `$serde_json::private::Number` is taken for a number by `serde_json` itself
//! (an ignored test in tests/it/canon.rs shows it).

use serde_json::{Map, Number, Value};
use std::fmt;

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonError {
    /// A float that is infinite (or NaN) once parsed, e.g. `1e400`.
    #[error("number {0} is out of range: NaN and Infinity are not allowed")]
    NonFinite(String),
}

/// What the writer does with a number that is out of range: the one way canonical JSON can
/// fail. Values read from outside refuse it ([`Refuse`]); values built in code cannot hold one
/// ([`built`]).
trait OutOfRange {
    type Error;
    fn number(out: &mut Vec<u8>, text: String) -> Result<(), Self::Error>;
}

/// A value read from outside: an out-of-range number has no canonical form.
enum Refuse {}

impl OutOfRange for Refuse {
    type Error = CanonError;
    fn number(_: &mut Vec<u8>, text: String) -> Result<(), CanonError> {
        Err(CanonError::NonFinite(text))
    }
}

/// A value built in code: see [`built`].
enum AsNull {}

impl OutOfRange for AsNull {
    type Error = std::convert::Infallible;
    fn number(out: &mut Vec<u8>, _: String) -> Result<(), Self::Error> {
        out.extend_from_slice(b"null");
        Ok(())
    }
}

/// Appends the canonical form of `v` to `out`.
pub fn write(out: &mut Vec<u8>, v: &Value) -> Result<(), CanonError> {
    write_value::<Refuse>(out, v)
}

fn write_value<R: OutOfRange>(out: &mut Vec<u8>, v: &Value) -> Result<(), R::Error> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number::<R>(out, n)?,
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value::<R>(out, item)?;
            }
            out.push(b']');
        }
        Value::Object(map) => write_map::<R>(out, map)?,
    }
    Ok(())
}

/// Appends the canonical form of an object (keys are already in code-point order in a
/// `serde_json::Map` without `preserve_order`).
pub fn write_object(out: &mut Vec<u8>, map: &Map<String, Value>) -> Result<(), CanonError> {
    write_map::<Refuse>(out, map)
}

fn write_map<R: OutOfRange>(out: &mut Vec<u8>, map: &Map<String, Value>) -> Result<(), R::Error> {
    out.push(b'{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, k);
        out.push(b':');
        write_value::<R>(out, v)?;
    }
    out.push(b'}');
    Ok(())
}

/// The canonical text of `v`, a value read from outside (a reply's marker data, a stored
/// event's meta): it fails on a number out of range.
pub fn to_string(v: &Value) -> Result<String, CanonError> {
    let mut out = Vec::with_capacity(128);
    write(&mut out, v)?;
    Ok(ascii(out))
}

/// The canonical text of `v`, a payload built in code, which cannot fail: its numbers come
/// from Rust integers and floats, and `serde_json` makes a float that is not finite `null`
/// (`json!(f64::NAN)` is `null`), so none is out of range. Were one copied in from outside,
/// it would be written as that `null` too, never as nothing. A value that holds anything read
/// from outside goes through [`to_string`] instead.
pub fn built(v: &Value) -> String {
    let mut out = Vec::with_capacity(128);
    match write_value::<AsNull>(&mut out, v) {
        Ok(()) => {}
        Err(never) => match never {},
    }
    ascii(out)
}

/// Canonical output is ASCII by construction, so this never replaces a byte.
fn ascii(out: Vec<u8>) -> String {
    match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_u16_escape(out: &mut Vec<u8>, unit: u16) {
    out.extend_from_slice(b"\\u");
    for shift in [12, 8, 4, 0] {
        out.push(HEX[((unit >> shift) & 0xf) as usize]);
    }
}

/// True if none of the 8 bytes in `x` needs escaping: all are printable ASCII (0x20..=0x7e)
/// and none is `"` or `\`. Bit tricks from "Bit Twiddling Hacks" (hasless, hasmore, haszero);
/// they may report a clean word as dirty (then the byte loop decides) but never the reverse.
#[inline]
fn clean8(x: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below_space = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
    // hasmore(x, 0x7e): adding 127 - 0x7e = 1 to each byte sets its high bit iff it is > 0x7e.
    let above_tilde = (x.wrapping_add(ONES) | x) & HIGH;
    let q = x ^ (ONES * b'"' as u64);
    let quote = q.wrapping_sub(ONES) & !q & HIGH;
    let b = x ^ (ONES * b'\\' as u64);
    let backslash = b.wrapping_sub(ONES) & !b & HIGH;
    (below_space | above_tilde | quote | backslash) == 0
}

/// Appends `s` as a CPython `ensure_ascii=True` JSON string literal, quotes included.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let (mut i, mut start) = (0, 0);
    while i < bytes.len() {
        // Plain printable ASCII is copied in runs, eight bytes at a time where possible.
        if let Some(word) = bytes.get(i..i + 8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            if clean8(u64::from_le_bytes(w)) {
                i += 8;
                continue;
            }
        }
        let b = bytes[i];
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            i += 1;
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0x00..=0x7f => push_u16_escape(out, b as u16),
            _ => {
                // A multi-byte character starts here; `s` is valid UTF-8 so this decodes.
                let ch = s[i..].chars().next().unwrap_or('\u{fffd}');
                let mut units = [0u16; 2];
                for unit in ch.encode_utf16(&mut units) {
                    push_u16_escape(out, *unit);
                }
                i += ch.len_utf8();
                start = i;
                continue;
            }
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// True when JSON `text` starts with an object (after JSON white space): what a typed read
/// into a struct must check first, since serde reads a struct from an array too.
pub fn starts_object(text: &str) -> bool {
    text.trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
}

/// True when the number's literal is a float in Python's eyes (has a fraction or exponent).
pub fn is_float_literal(text: &str) -> bool {
    text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
}

fn write_number<R: OutOfRange>(out: &mut Vec<u8>, n: &Number) -> Result<(), R::Error> {
    // With `arbitrary_precision` the Display form is the literal as parsed.
    let text = n.to_string();
    if is_float_literal(&text) {
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => out.extend_from_slice(float_repr(f).as_bytes()),
            _ => R::number(out, text)?,
        }
    } else if text.trim_start_matches('-').bytes().all(|b| b == b'0') {
        out.push(b'0');
    } else {
        out.extend_from_slice(text.as_bytes());
    }
    Ok(())
}

/// CPython's `repr(float)` for a finite `f`.
pub fn float_repr(f: f64) -> String {
    // Rust's `{:e}` gives the shortest digits that round-trip, as CPython's repr does; the
    // layout differs, and so can the last digit when two strings of that length round-trip and
    // are equally close: 1000000000000000.25 gives Rust `…0.3` but CPython (dtoa, ties to even)
    // `…0.2`. CPython's answer is the correctly rounded, ties-to-even string with that many
    // digits, which Rust's exact mode `{:.N$e}` makes, whenever it round-trips. When it does not
    // (the interval below a power of two is half as wide: 2**-24 is …0625, CPython …063), the
    // shortest form is the only candidate left.
    let shortest = format!("{f:e}");
    let sig_digits = shortest
        .split('e')
        .next()
        .unwrap_or("")
        .bytes()
        .filter(u8::is_ascii_digit)
        .count();
    let nearest = format!("{f:.*e}", sig_digits.saturating_sub(1));
    let sci = if nearest.parse::<f64>().map(f64::to_bits) == Ok(f.to_bits()) {
        nearest
    } else {
        shortest
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut s = String::with_capacity(digits.len() + 8);
    s.push_str(sign);
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                s.push_str(&digits);
                s.push_str(&"0".repeat(int_len - digits.len()));
                s.push_str(".0");
            } else {
                s.push_str(&digits[..int_len]);
                s.push('.');
                s.push_str(&digits[int_len..]);
            }
        } else {
            s.push_str("0.");
            s.push_str(&"0".repeat((-exp - 1) as usize));
            s.push_str(&digits);
        }
    } else {
        s.push_str(&digits[..1]);
        if digits.len() > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        s.push('e');
        s.push(if exp < 0 { '-' } else { '+' });
        let abs = exp.unsigned_abs();
        if abs < 10 {
            s.push('0');
        }
        s.push_str(&abs.to_string());
    }
    s
}

/// Why a piece of JSON text cannot be a `meta` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaError(pub String);

impl fmt::Display for MetaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MetaError {}

/// Explains a `serde_json` parse error in the user's terms (NaN, surrogates, ...).
pub fn explain_json_error(text: &str, e: &serde_json::Error) -> String {
    let msg = e.to_string();
    if msg.contains("surrogate") || msg.contains("hex escape") {
        return format!("lone surrogate in a \\u escape ({msg}); JSON text must be valid Unicode");
    }
    if msg.starts_with("expected value") || msg.starts_with("invalid number") {
        for word in ["NaN", "Infinity", "-Infinity"] {
            if text.contains(word) {
                return format!("{word} is not valid JSON ({msg})");
            }
        }
    }
    format!("not valid JSON: {msg}")
}

/// Parses `text` as a `meta` object and checks that it has a canonical form. Duplicate keys:
/// the last wins, as in CPython.
pub fn parse_meta(text: &str) -> Result<Map<String, Value>, MetaError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| MetaError(explain_json_error(text, &e)))?;
    into_meta(v)
}

/// Checks that an already-parsed value is a valid `meta` object.
pub fn into_meta(v: Value) -> Result<Map<String, Value>, MetaError> {
    match v {
        Value::Object(map) => {
            let mut scratch = Vec::new();
            write_object(&mut scratch, &map).map_err(|e| MetaError(e.to_string()))?;
            Ok(map)
        }
        other => Err(MetaError(format!(
            "meta must be a JSON object, not {}",
            type_name(&other)
        ))),
    }
}

/// The JSON type of `v`, for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Appends the hashed payload of an event up to its link: everything before the value of
/// `prev_hash`, the payload's last key (`{"content":…,"kind":…,"meta":…,"prev_hash":`). The
/// payload is this, then the `prev_hash` as a JSON string (or `null`), then `}`: what lets a
/// PostgreSQL server link an event to a head only it knows (`store::postgres`).
pub fn write_event_payload_before_link(
    out: &mut Vec<u8>,
    kind: &str,
    content: &str,
    meta: &Map<String, Value>,
) -> Result<(), CanonError> {
    out.extend_from_slice(b"{\"content\":");
    write_str(out, content);
    out.extend_from_slice(b",\"kind\":");
    write_str(out, kind);
    out.extend_from_slice(b",\"meta\":");
    write_object(out, meta)?;
    out.extend_from_slice(b",\"prev_hash\":");
    Ok(())
}

/// Appends the hashed payload of an event:
/// `{"content":…,"kind":…,"meta":…,"prev_hash":…}` in canonical form (keys already sorted).
pub fn write_event_payload(
    out: &mut Vec<u8>,
    kind: &str,
    content: &str,
    meta: &Map<String, Value>,
    prev_hash: Option<&str>,
) -> Result<(), CanonError> {
    write_event_payload_before_link(out, kind, content, meta)?;
    match prev_hash {
        Some(p) => write_str(out, p),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> String {
        let v: Value = serde_json::from_str(text).unwrap();
        to_string(&v).unwrap()
    }

    #[test]
    fn escapes_like_cpython() {
        assert_eq!(
            canon(r#"{"a":"é😀\u007f\u0001/"}"#),
            r#"{"a":"\u00e9\ud83d\ude00\u007f\u0001/"}"#
        );
        assert_eq!(canon(r#"["\b\f\n\r\t\"\\"]"#), r#"["\b\f\n\r\t\"\\"]"#);
    }

    #[test]
    fn sorts_keys_by_code_point() {
        assert_eq!(
            canon(r#"{"é":1,"z":2,"A":3,"😀":4,"ﬀ":5}"#),
            "{\"A\":3,\"z\":2,\"\\u00e9\":1,\"\\ufb00\":5,\"\\ud83d\\ude00\":4}"
        );
    }

    #[test]
    fn a_built_payload_has_the_same_text_and_cannot_fail() {
        let v = serde_json::json!({"b": [1, 2.5, "x\u{e9}"], "a": {"n": null, "f": 1e-5}, "nan": f64::NAN});
        assert_eq!(built(&v), to_string(&v).unwrap());
        assert_eq!(
            built(&v),
            r#"{"a":{"f":1e-05,"n":null},"b":[1,2.5,"x\u00e9"],"nan":null}"#
        );
        // Copied in from outside, an out-of-range number is refused by `to_string`, and
        // written as null (never as nothing) by `built`.
        let outside: Value = serde_json::from_str(r#"{"x":1e400}"#).unwrap();
        assert!(to_string(&outside).is_err());
        assert_eq!(built(&outside), r#"{"x":null}"#);
    }

    /// A canonical text is never replaced by an empty one: code that builds a payload calls
    /// [`built`], which cannot fail, and a value read from outside keeps its error.
    #[test]
    fn no_canonical_text_falls_back_to_nothing() {
        let mut found = Vec::new();
        for (path, code) in crate::event::vocab::tests::library_code() {
            let lines: Vec<&str> = code.lines().map(str::trim).collect();
            for (n, pair) in lines.windows(2).enumerate() {
                let call = pair[0].contains("canon::to_string(");
                let fallback = |l: &str| l.contains(".unwrap_or_default()");
                if call && (fallback(pair[0]) || (fallback(pair[1]) && pair[1].starts_with('.'))) {
                    found.push(format!("{path}:{}: {}", n + 1, pair[0]));
                }
            }
        }
        assert!(found.is_empty(), "{}", found.join("\n"));
    }

    #[test]
    fn floats_follow_python_repr() {
        for (f, want) in [
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (9999999999999998.0, "9999999999999998.0"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (1.2345678901234567e19, "1.2345678901234567e+19"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (123456.789, "123456.789"),
            // Two shortest candidates equally close (the values are exact sums, written so to
            // keep every digit of the literal): CPython rounds half to even...
            (1e15 + 0.25, "1000000000000000.2"),
            (-(999999999999999.0 + 0.25), "-999999999999999.2"),
            (562949953421312.0 + 0.75, "562949953421312.8"),
            // ...unless the even one falls outside the narrower interval below a power of two
            // (2**-24 is exactly 5.9604644775390625e-08).
            (2f64.powi(-24), "5.960464477539063e-08"),
        ] {
            assert_eq!(float_repr(f), want, "{f:e}");
        }
    }

    #[test]
    fn integers_stay_exact() {
        assert_eq!(
            canon(r#"[123456789012345678901234567890,-0,-18446744073709551617]"#),
            "[123456789012345678901234567890,0,-18446744073709551617]"
        );
        assert_eq!(canon("[1.000000E-01,1e2,-0.0]"), "[0.1,100.0,-0.0]");
    }

    #[test]
    fn refuses_what_cpython_cannot_produce() {
        assert!(parse_meta(r#"{"a":NaN}"#).unwrap_err().0.contains("NaN"));
        assert!(parse_meta(r#"{"a":1e400}"#)
            .unwrap_err()
            .0
            .contains("out of range"));
        assert!(parse_meta(r#"{"a":"\ud800"}"#)
            .unwrap_err()
            .0
            .contains("surrogate"));
        assert!(parse_meta(r#"[1]"#)
            .unwrap_err()
            .0
            .contains("must be a JSON object"));
        assert!(parse_meta(r#"{"a":1,"a":2}"#).is_ok());
    }

    #[test]
    fn reference_test_vector() {
        // FORMATS.md §1.2: the first event of the reference ledger.
        let content = r#"{"forbid_sources":{"cli":["config","checkpoint_manifest","embedding_add","retrieval_selection"]},"type":"policy"}"#;
        let meta = parse_meta(r#"{"source":"autonomy_kernel"}"#).unwrap();
        let mut out = Vec::new();
        write_event_payload(&mut out, "config", content, &meta, None).unwrap();
        let digest = crate::chain::Digest::of(&out);
        assert_eq!(
            digest.to_string(),
            "c7f30b6fd0e906abc44461a4e75c1d2187e524a611dab0a8f32c307fd01029b1"
        );
    }
}
