//! Identity adoption (FORMATS.md §4.3): a token that has both an `identity_proposal` and an
//! `identity_ratify` claim is adopted, once.
//!
//! One rule, the Mirror's fold ([`Identity::note_claim`]), which every turn runs; this is its
//! batch form over a list of claims (what the fuzzer drives). Because pmm records only claims that passed
//! validation (unknown types fail as unsupported), the two claims are real checked claims, not
//! any two lines as in the reference (FORMATS.md §17 item 12).

use crate::projection::mirror::Identity;
use std::collections::BTreeSet;

/// The adoptions due: for every token with both a proposal and a ratification among `claims`
/// and not in `already_adopted`, `(token, earliest proposal id, earliest ratify id)`, sorted
/// by token (code point order, as Python sorts strings).
///
/// `claims` are `(claim event id, meta.claim_type, content)` of `claim` events, in any order.
/// The rule is the Mirror's ([`Identity::note_claim`], the one that runs in every turn): a
/// claim counts only if its content is `CLAIM:<type>=<json>` with the header type equal to
/// `claim_type` and the JSON an object whose `token` is a non-empty string; the token is
/// Python-stripped. Whether the ratification comes before or after the proposal does not
/// matter.
pub fn adoptions<'a>(
    claims: impl Iterator<Item = (i64, &'a str, &'a str)>,
    already_adopted: &BTreeSet<String>,
) -> Vec<(String, i64, i64)> {
    let mut identity = Identity {
        adopted: already_adopted.iter().cloned().collect(),
        ..Identity::default()
    };
    for (id, claim_type, content) in claims {
        identity.note_claim(id, claim_type, content);
    }
    identity.pending_adoptions()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(claims: &[(i64, &str, &str)], adopted: &[&str]) -> Vec<(String, i64, i64)> {
        let adopted = adopted.iter().map(|s| s.to_string()).collect();
        adoptions(claims.iter().copied(), &adopted)
    }

    #[test]
    fn adoption_needs_both_claims_and_takes_the_earliest_of_each() {
        let claims = [
            (
                12,
                "identity_ratify",
                r#"CLAIM:identity_ratify={"token":"Echo"}"#,
            ),
            (
                5,
                "identity_proposal",
                r#"CLAIM:identity_proposal={"token":" Echo ","description":"d"}"#,
            ),
            (
                9,
                "identity_proposal",
                r#"CLAIM:identity_proposal={"token":"Echo"}"#,
            ),
            (
                3,
                "identity_ratify",
                r#"CLAIM:identity_ratify={"token":"Echo"}"#,
            ),
            (
                7,
                "identity_proposal",
                r#"CLAIM:identity_proposal={"token":"Lone"}"#,
            ),
        ];
        // Ratification before the proposal still counts ("order irrelevant").
        assert_eq!(run(&claims, &[]), [("Echo".to_string(), 5, 3)]);
        assert_eq!(run(&claims, &["Echo"]), []);
    }

    #[test]
    fn adoptions_are_sorted_by_token() {
        let claims = [
            (
                1,
                "identity_proposal",
                r#"CLAIM:identity_proposal={"token":"b"}"#,
            ),
            (
                2,
                "identity_proposal",
                r#"CLAIM:identity_proposal={"token":"B"}"#,
            ),
            (
                3,
                "identity_proposal",
                r#"CLAIM:identity_proposal={"token":"a"}"#,
            ),
            (
                4,
                "identity_ratify",
                r#"CLAIM:identity_ratify={"token":"a"}"#,
            ),
            (
                5,
                "identity_ratify",
                r#"CLAIM:identity_ratify={"token":"b"}"#,
            ),
            (
                6,
                "identity_ratify",
                r#"CLAIM:identity_ratify={"token":"B"}"#,
            ),
            (
                7,
                "identity_ratify",
                r#"CLAIM:identity_ratify={"token":"é"}"#,
            ),
            (
                8,
                "identity_proposal",
                r#"CLAIM:identity_proposal={"token":"é"}"#,
            ),
        ];
        let got: Vec<_> = run(&claims, &["b"])
            .into_iter()
            .map(|(t, p, r)| format!("{t}:{p}:{r}"))
            .collect();
        assert_eq!(got, ["B:2:6", "a:3:4", "é:8:7"]);
    }

    #[test]
    fn malformed_or_mismatched_claims_do_not_count() {
        let claims = [
            (
                1,
                "identity_proposal",
                r#"CLAIM:identity_ratify={"token":"x"}"#,
            ), // header ≠ meta type
            (2, "identity_proposal", r#"identity_proposal={"token":"x"}"#), // no CLAIM: prefix
            (
                3,
                "identity_proposal",
                r#"CLAIM:identity_proposal={"token":""}"#,
            ),
            (
                4,
                "identity_proposal",
                r#"CLAIM:identity_proposal={"token":5}"#,
            ),
            (5, "identity_proposal", r#"CLAIM:identity_proposal=["x"]"#),
            (6, "name_change", r#"CLAIM:identity_proposal={"token":"x"}"#),
            (
                7,
                "identity_ratify",
                r#"CLAIM:identity_ratify={"token":"x"}"#,
            ),
        ];
        assert_eq!(run(&claims, &[]), []);
    }
}
