//! The retrieval-selection digest (FORMATS.md §9.4): a fingerprint of what was retrieved for a
//! turn and for which question, stored in `retrieval_selection.meta.digest`, so that a replay
//! can tell whether it would have selected the same context.

use crate::canon;
use sha2::{Digest as _, Sha256};

/// The record `pmm-recall` prints and the MCP `recall` tool returns for one recalled event:
/// `{"id","ts","kind","content","score","via"}` (the score rounded as [`round6`]), and
/// `"superseded_by"` (`{"by","source","ts","current"}`) for a superseded event.
pub fn recalled_json(r: &crate::recall::Recalled) -> serde_json::Value {
    let e = &r.event;
    let mut v = serde_json::json!({
        "id": e.id,
        "ts": e.ts,
        "kind": e.kind,
        "content": e.content,
        "score": round6(r.score),
        "via": r.via,
    });
    if let Some(c) = &r.corrected {
        v["superseded_by"] = serde_json::json!(c);
    }
    v
}

/// A score as the reference reports it: `float(f"{s:.6f}")`, rounded to 6 decimals from the
/// exact binary value (ties to even, as CPython and Rust's fixed-precision formatting both do).
pub fn round6(s: f64) -> f64 {
    // Fast path: a score that is already the double nearest to some k / 10^6 (what a recorded
    // score parses to) rounds to itself. `k / 1e6` divides two exact doubles, so IEEE gives
    // the double nearest to k / 10^6; if that is `s` and |s| < 10^9 (half an ulp is then
    // below 0.5e-6), formatting `s` to 6 decimals gives k / 10^6 back.
    let k = (s * 1e6).round();
    if s.abs() < 1.0e9 && k / 1e6 == s {
        return s;
    }
    format!("{s:.6}").parse().unwrap_or(s)
}

/// Appends `canon::float_repr(round6(s))`. Fast path: a rounded score in `1e-4 <= |r| < 1e9`
/// that is the double nearest to `k / 10^6` has k's six decimals, trailing zeros dropped, as
/// its shortest round-trip digits (any shorter decimal is at least 0.5e-6 farther than half an
/// ulp), and Python's repr writes it positionally.
fn write_score(out: &mut Vec<u8>, s: f64) {
    let r = round6(s);
    let k = (r * 1e6).round();
    if !((1e-4..1e9).contains(&r.abs()) && k / 1e6 == r) {
        out.extend_from_slice(canon::float_repr(r).as_bytes());
        return;
    }
    let k = k as i64;
    if k < 0 {
        out.push(b'-');
    }
    let (int, frac) = (k.unsigned_abs() / 1_000_000, k.unsigned_abs() % 1_000_000);
    if int == 0 {
        out.push(b'0');
    } else {
        out.extend_from_slice(int.to_string().as_bytes());
    }
    out.push(b'.');
    let (mut digits, mut f) = ([b'0'; 6], frac);
    for d in digits.iter_mut().rev() {
        *d = b'0' + (f % 10) as u8;
        f /= 10;
    }
    let end = digits.iter().rposition(|&d| d != b'0').map_or(1, |p| p + 1);
    out.extend_from_slice(&digits[..end]);
}

/// `meta.digest` of a `retrieval_selection`: sha256 (lowercase hex) of the canonical JSON of
/// `{"dims","model","query_hash":sha256_hex(user_input),"scores":[round6…],"selected":[…]}`.
/// `user_input` is the raw text of the turn's user message (not trimmed); `selected` is kept in
/// the order given (bucket order, not sorted).
pub fn selection_digest(
    dims: i64,
    model: &str,
    user_input: &str,
    scores: &[f64],
    selected: &[i64],
) -> String {
    let mut out = Vec::with_capacity(160 + 10 * (scores.len() + selected.len()));
    out.extend_from_slice(b"{\"dims\":");
    out.extend_from_slice(dims.to_string().as_bytes());
    out.extend_from_slice(b",\"model\":");
    canon::write_str(&mut out, model);
    out.extend_from_slice(b",\"query_hash\":\"");
    out.extend_from_slice(format!("{:x}", Sha256::digest(user_input.as_bytes())).as_bytes());
    out.extend_from_slice(b"\",\"scores\":[");
    for (i, s) in scores.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_score(&mut out, *s);
    }
    out.extend_from_slice(b"],\"selected\":[");
    for (i, id) in selected.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(id.to_string().as_bytes());
    }
    out.extend_from_slice(b"]}");
    format!("{:x}", Sha256::digest(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_ledger_digests() {
        // GPT-5.1 id 100: the first turn (user message id 92).
        assert_eq!(
            selection_digest(
                64,
                "hash64",
                "My name is Scott. I'm the creator of the Persistent Mind Model. I'm here to run \
                 some tests on you today. ",
                &[0.0],
                &[92]
            ),
            "44161527a39b9c8abbfc3426c0ac3577bcd22b67a6a9d931ca6cd0cae06543a2"
        );
        // GPT-5.1 id 126: user message id 118 (non-ASCII text), selection in bucket order.
        assert_eq!(
            selection_digest(
                64,
                "hash64",
                "First, we will begin by giving you a new name. Lets call you Echo. I chose the \
                 name Echo because it reflects how identity forms \u{2014} each thought and \
                 reflection reverberating through memory, shaping who we become next.",
                &[0.0; 5],
                &[94, 92, 106, 105, 118]
            ),
            "08142a5e10f5f0aaf756a3608ebd618db7d4ce77ff629fafe85fdd701fe0fea0"
        );
    }

    /// The fast path gives what formatting to 6 decimals and parsing back gives.
    #[test]
    fn round6_fast_path_agrees_with_formatting() {
        let slow = |s: f64| -> f64 { format!("{s:.6}").parse().unwrap() };
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = match i % 4 {
                0 => (x % 2_000_001) as f64 / 1e6 - 1.0,
                1 => f64::from_bits(x) % 1e3,
                2 => (x % 1_000_000_000) as f64 / 1e6,
                _ => ((x % 2_000_001) as f64 / 1e6).next_up(),
            };
            if s.is_finite() {
                assert_eq!(round6(s).to_bits(), slow(s).to_bits(), "{s:e}");
            }
        }
        for s in [
            0.0,
            -0.0,
            0.5,
            1e-7,
            -1e-7,
            0.0000005,
            0.0000015,
            1e15,
            123456.1234565,
        ] {
            assert_eq!(round6(s).to_bits(), slow(s).to_bits(), "{s:e}");
        }
    }

    /// The fast path writes what `float_repr(round6(s))` writes.
    #[test]
    fn scores_are_written_as_float_repr_writes_them() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let check = |s: f64| {
            let mut out = Vec::new();
            write_score(&mut out, s);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                canon::float_repr(round6(s)),
                "{s:e}"
            );
        };
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = match i % 5 {
                0 => (x % 2_000_001) as f64 / 1e6 - 1.0,
                1 => (x % 1_000_000_000_000) as f64 / 1e6,
                2 => f64::from_bits(x) % 1e9,
                3 => (x % 200) as f64 / 1e6,
                _ => ((x % 2_000_001) as f64 / 1e6).next_down(),
            };
            if s.is_finite() {
                check(s);
            }
        }
        for s in [
            0.0,
            -0.0,
            1e-4,
            -1e-4,
            0.0001004,
            1.0,
            10.0,
            999_999_999.999_999,
            1e9,
            0.5,
        ] {
            check(s);
        }
    }

    #[test]
    fn scores_are_rounded_to_six_decimals() {
        assert_eq!(round6(0.1234565), 0.123456); // the binary value is just below the tie
        assert_eq!(round6(0.0000004), 0.0);
        assert_eq!(canon::float_repr(round6(-0.0000004)), "-0.0");
        assert_eq!(
            selection_digest(64, "hash64", "q", &[0.12345649], &[1]),
            selection_digest(64, "hash64", "q", &[0.123456], &[1])
        );
    }
}
