//! The retrieval-selection digest (FORMATS.md §9.4): a fingerprint of what was retrieved for a
//! turn and for which question, stored in `retrieval_selection.meta.digest`, so that a replay
//! can tell whether it would have selected the same context.

use crate::canon;
use sha2::{Digest as _, Sha256};

/// A score as the reference reports it: `float(f"{s:.6f}")`, rounded to 6 decimals from the
/// exact binary value (ties to even, as CPython and Rust's fixed-precision formatting both do).
pub fn round6(s: f64) -> f64 {
    format!("{s:.6}").parse().unwrap_or(s)
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
        out.extend_from_slice(canon::float_repr(round6(*s)).as_bytes());
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
