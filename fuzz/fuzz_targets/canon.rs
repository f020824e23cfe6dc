//! Canonical JSON (`pmm::canon`) over arbitrary bytes.
//!
//! Checks: no panic; a value that has a canonical form canonicalizes to ASCII; the canonical
//! text parses back to an equal value (numbers compared as CPython would: integers exactly,
//! floats by their f64 bits); canonicalizing the re-parsed value gives the same bytes again;
//! `parse_meta` agrees with `to_string` on objects; the hashed event payload built around an
//! object is itself JSON with the four fields. The first 8 bytes, read as an f64, also go
//! through `float_repr`, which must round-trip and follow CPython's layout.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pmm::canon;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if let Some(bits) = data.get(..8) {
        check_float(f64::from_le_bytes(bits.try_into().unwrap()));
    }
    let text = String::from_utf8_lossy(data);
    // parse_meta never panics, and explains every refusal.
    let meta = canon::parse_meta(&text);
    let v: Value = match serde_json::from_slice(data) {
        Ok(v) => v,
        Err(e) => {
            let msg = canon::explain_json_error(&text, &e);
            assert!(!msg.is_empty());
            if std::str::from_utf8(data).is_ok() {
                assert!(meta.is_err(), "parse_meta accepted what serde_json refused");
            }
            return;
        }
    };
    let first = match canon::to_string(&v) {
        Ok(s) => s,
        Err(canon::CanonError::NonFinite(n)) => {
            assert!(canon::is_float_literal(&n), "non-finite integer {n}");
            assert!(
                meta.is_err(),
                "parse_meta accepted a value without a canonical form"
            );
            return;
        }
    };
    assert!(first.is_ascii(), "canonical text is not ASCII: {first:?}");
    let again: Value = serde_json::from_str(&first)
        .unwrap_or_else(|e| panic!("canonical text does not parse: {e}: {first:?}"));
    assert!(
        same(&v, &again),
        "canonical text parses to a different value:\n{v:?}\n{again:?}"
    );
    let second = canon::to_string(&again).expect("canonical text has no canonical form");
    assert_eq!(first, second, "canonicalizing twice differs");

    match (&v, &meta) {
        (Value::Object(map), Ok(m)) => {
            assert!(same(&Value::Object(m.clone()), &v));
            let mut out = Vec::new();
            canon::write_object(&mut out, map).unwrap();
            assert_eq!(out, first.as_bytes());
            out.clear();
            canon::write_event_payload(&mut out, "kind\u{2028}", &text, map, Some("p\"")).unwrap();
            let payload: Value = serde_json::from_slice(&out).expect("payload is not JSON");
            assert_eq!(payload["kind"], "kind\u{2028}");
            assert_eq!(payload["content"].as_str(), Some(&*text));
            assert_eq!(payload["prev_hash"], "p\"");
            assert!(same(&payload["meta"], &v));
        }
        (Value::Object(_), Err(e)) => {
            panic!("parse_meta refused an object with a canonical form: {e}")
        }
        (_, Ok(_)) => panic!("parse_meta accepted a non-object"),
        (_, Err(_)) => {}
    }
});

/// Equality as CPython's `json.loads` would see it.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.to_string(), y.to_string());
            match (canon::is_float_literal(&x), canon::is_float_literal(&y)) {
                (true, true) => {
                    let (fx, fy): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                    fx.to_bits() == fy.to_bits()
                }
                (false, false) => int_norm(&x) == int_norm(&y),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, a), (kb, b))| ka == kb && same(a, b))
        }
        _ => a == b,
    }
}

fn int_norm(s: &str) -> &str {
    if s.trim_start_matches('-').bytes().all(|b| b == b'0') {
        "0"
    } else {
        s
    }
}

fn check_float(f: f64) {
    if !f.is_finite() {
        return;
    }
    let r = canon::float_repr(f);
    let back: f64 = r
        .parse()
        .unwrap_or_else(|e| panic!("{r:?} does not parse: {e}"));
    assert_eq!(back.to_bits(), f.to_bits(), "{r} does not round-trip {f:e}");
    let a = f.abs();
    let positional = a == 0.0 || (1e-4..1e16).contains(&a);
    if positional {
        assert!(r.contains('.') && !r.contains('e'), "{r} for {f:e}");
    } else {
        assert!(r.contains("e+") || r.contains("e-"), "{r} for {f:e}");
    }
    assert!(canon::is_float_literal(&r));
}
