//! The marker parser (`pmm::marker::parse`, a model reply's COMMIT/CLOSE/CLAIM/REFLECT/REF
//! lines) and the claim checks (`pmm::claim`) over arbitrary text (invalid UTF-8 is replaced,
//! as a reply decoded lossily would be).
//!
//! Checks: no panic; every marker's line number is within the reply's lines (as
//! `str.splitlines()` counts them) and each list is in reply order; texts are non-empty and
//! stripped; a well-formed claim has a canonical form, and its `claim` event content
//! (`claim_content`) parses back to the same claim; every claim gets exactly one verdict, on
//! its line; the turn-delta reflection built from all this has one line per part, each with a
//! known heading (nothing in a claim or a REFLECT item can start a line of its own, e.g. a
//! `REF:` line); `ref_targets`, `parse_ref`, `commit_texts` and `adoptions` never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pmm::claim::{self, ClaimContext};
use pmm::marker::{self, py_strip, splitlines, Line};
use std::collections::BTreeSet;

/// Events 1..=10 exist; commitment `c1` is open, `c2` was opened and closed.
struct Ctx;

impl ClaimContext for Ctx {
    fn event_exists(&self, id: i64) -> bool {
        (1..=10).contains(&id)
    }
    fn commitment_is_open(&self, cid: &str) -> bool {
        cid == "c1"
    }
    fn commitment_was_opened(&self, cid: &str) -> Option<bool> {
        Some(cid == "c1" || cid == "c2")
    }
}

fn check_lines<T>(what: &str, lines: &[Line<T>], n: usize) {
    let mut last = 0;
    for l in lines {
        assert!(
            (1..=n.max(1)).contains(&l.line),
            "{what} on line {} of {n}",
            l.line
        );
        assert!(l.line >= last, "{what} out of order");
        last = l.line;
    }
}

fn check_texts(what: &str, lines: &[Line<String>]) {
    for l in lines {
        assert!(!l.value.is_empty(), "empty {what}");
        assert_eq!(py_strip(&l.value), l.value, "unstripped {what}");
    }
}

fuzz_target!(|data: &[u8]| {
    let reply = String::from_utf8_lossy(data);
    let n = splitlines(&reply).len();
    let m = marker::parse(&reply);

    check_lines("COMMIT", &m.commits, n);
    check_lines("CLOSE", &m.closes, n);
    check_lines("CLAIM", &m.claims, n);
    check_lines("REF", &m.refs, n);
    check_lines("REFLECT", m.reflect.as_slice(), n);
    check_texts("COMMIT", &m.commits);
    check_texts("CLOSE", &m.closes);
    check_texts("REF", &m.refs);
    for t in marker::commit_texts(&reply) {
        assert!(!t.is_empty() && py_strip(&t) == t);
    }
    for t in marker::ref_targets(&reply) {
        assert!(!t.is_empty());
        if let Some(req) = claim::parse_ref(&t) {
            assert!(!req.path.is_empty());
        }
    }

    // Well-formed claims: canonical, and their event content reads back as the same claim.
    for c in &m.claims {
        match &c.value {
            Ok(cm) => {
                assert_eq!(py_strip(&cm.raw), cm.raw);
                assert_eq!(py_strip(&cm.claim_type), cm.claim_type);
                let canon =
                    pmm::canon::to_string(&cm.data).expect("claim data without a canonical form");
                let content = claim::claim_content(cm);
                assert_eq!(content, format!("CLAIM:{}={canon}", cm.claim_type));
                let again = marker::parse(&content);
                assert_eq!(
                    again.claims.len(),
                    1,
                    "{content:?} holds {} claims",
                    again.claims.len()
                );
                let back = again.claims[0].value.as_ref().unwrap_or_else(|e| {
                    panic!("claim content {content:?} does not parse back: {e}")
                });
                assert_eq!(back.claim_type, cm.claim_type);
                assert_eq!(pmm::canon::to_string(&back.data).unwrap(), canon);
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                assert_eq!(py_strip(e.raw()), e.raw());
            }
        }
    }

    // Every claim gets one verdict, on its own line.
    let (valid, failed) = claim::check_all(&m.claims, &Ctx);
    assert_eq!(valid.len() + failed.len(), m.claims.len());
    for f in &failed {
        let line = f.line.expect("a failed claim without its line");
        assert!(m.claims.iter().any(|c| c.line == line));
    }
    for v in &valid {
        assert!(m.claims.iter().any(|c| c.line == v.line));
        assert!(claim::SUPPORTED_TYPES.contains(&v.value.claim_type.as_str()));
    }

    // The turn-delta reflection: one line per part, each with a known heading.
    let opened: Vec<String> = m.commits.iter().map(|l| l.value.clone()).collect();
    let closed: Vec<String> = m.closes.iter().map(|l| l.value.clone()).collect();
    let reflect = m.reflect.as_ref().and_then(|r| r.value.as_ref().ok());
    let pairs: Vec<(String, String)> = failed
        .iter()
        .map(|f| (f.raw.clone(), f.reason.clone()))
        .collect();
    for text in [
        claim::delta_text(&failed, &opened, &closed, reflect),
        claim::delta_reflection_text(&pairs, &opened, &closed, reflect),
    ]
    .into_iter()
    .flatten()
    {
        for line in splitlines(&text) {
            assert!(
                [
                    "Corrections: ",
                    "- ",
                    "Opened commitments: ",
                    "Closed commitments: ",
                    "Observations: ",
                    "Next: ",
                ]
                .iter()
                .any(|h| line.starts_with(h)),
                "delta reflection line without a heading: {line:?}\nin {text:?}"
            );
        }
        assert!(
            marker::ref_targets(&text).is_empty() || !marker::ref_targets(&reply).is_empty(),
            "the delta reflection has REF: targets the reply did not: {text:?}"
        );
    }

    // Identity adoption over the valid claims, recorded as the turn records them.
    let contents: Vec<(i64, String, String)> = valid
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (
                i as i64 + 1,
                v.value.claim_type.clone(),
                claim::claim_content(v.value),
            )
        })
        .collect();
    let adopted = BTreeSet::new();
    for (token, p, r) in claim::adoptions(
        contents
            .iter()
            .map(|(i, t, c)| (*i, t.as_str(), c.as_str())),
        &adopted,
    ) {
        assert!(!token.is_empty() && py_strip(&token) == token);
        assert!(p >= 1 && r >= 1);
    }
});
