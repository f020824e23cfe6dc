//! The turn-delta reflection (FORMATS.md §7.2): what a turn corrected, opened and closed, and
//! what the model's `REFLECT:` block said, as one reflection's text.
//!
//! The text, one part per line, each part only when it has something to say:
//!
//! ```text
//! Corrections: invalid claims detected (<sorted unique failed claim types, ", ">).
//! - line <n>: <claim line, cut at 120 characters>: <reason>      (one per failed claim)
//! Opened commitments: <sorted cids, ", ">.
//! Closed commitments: <sorted cids, ", ">.
//! Observations: <items, "; ">.
//! Corrections: <items, "; ">.
//! Next: <items, "; ">.
//! ```
//!
//! Lines 1 and 3–7 are the reference's. The per-claim lines are ours: SPEC §4 says a failed
//! claim appears in the correction reflection, and the type alone does not tell the model
//! which line failed or why. They follow the summary line so that the summary still reads
//! first and the rest of the text keeps the reference's order. A claim without a usable type
//! (no `=`, or a type that is not a plain word) is listed as `malformed`.
//!
//! Fixed relative to the reference (FORMATS.md §17 item 34): a string value is one item (the
//! reference joined its characters with "; "); the model keys `observation`, `insight(s)` and
//! `note(s)` count as observations and `correction` as corrections (the reference ignored
//! them and wrote nothing). Also: empty items are skipped, non-string items are written as
//! compact JSON (the reference used Python `str()`), line breaks inside an item become spaces
//! (so every part stays one line, and an item cannot smuggle in a `REF:` line), and no second
//! period is added after an item list that already ends in `.`, `!` or `?`.

use super::ClaimFailure;
use crate::marker::{is_line_break, py_strip, ClaimMarker, ClaimParseError};
use serde_json::{Map, Value};

/// Longest claim line quoted in a per-claim correction line, in characters.
const RAW_MAX: usize = 120;

/// REFLECT keys read as observations, in this order.
const OBSERVATION_KEYS: [&str; 6] = [
    "observations",
    "observation",
    "insights",
    "insight",
    "notes",
    "note",
];
/// REFLECT keys read as corrections, in this order.
const CORRECTION_KEYS: [&str; 2] = ["corrections", "correction"];
/// REFLECT keys read as next steps.
const NEXT_KEYS: [&str; 1] = ["next"];

/// One claim that failed, as the correction reflection reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedClaim {
    /// The reply line it is on, when known.
    pub line: Option<usize>,
    /// Its type for the summary line, or `malformed`.
    pub label: String,
    /// The claim line (or, failing that, the type), quoted in its correction line.
    pub raw: String,
    /// Why it failed.
    pub reason: String,
}

impl FailedClaim {
    /// A `CLAIM:` line that did not parse.
    pub fn from_parse_error(line: usize, e: &ClaimParseError) -> Self {
        FailedClaim {
            line: Some(line),
            label: e.claim_type().map_or_else(|| "malformed".into(), label),
            raw: e.raw().into(),
            reason: e.to_string(),
        }
    }

    /// A well-formed claim that failed validation.
    pub fn from_failure(line: usize, claim: &ClaimMarker, f: &ClaimFailure) -> Self {
        FailedClaim {
            line: Some(line),
            label: label(&claim.claim_type),
            raw: claim.raw.clone(),
            reason: f.to_string(),
        }
    }
}

/// The summary label of a claim type: the type when it is a plain word, else `malformed`
/// (`CLAIM:{"a":"x=y"}` splits into the "type" `{"a":"x`).
fn label(claim_type: &str) -> String {
    let plain = !claim_type.is_empty()
        && claim_type.chars().count() <= 64
        && claim_type
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if plain {
        claim_type.into()
    } else {
        "malformed".into()
    }
}

/// The first `max` characters of `s`, with `...` when cut.
pub(super) fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.into(),
        Some((i, _)) => format!("{}...", &s[..i]),
    }
}

/// The turn-delta reflection text, with the per-claim correction lines (see the module
/// documentation for the format), or `None` when there is nothing to say.
pub fn delta_text(
    failed: &[FailedClaim],
    opened: &[String],
    closed: &[String],
    reflect: Option<&Map<String, Value>>,
) -> Option<String> {
    let mut parts = Vec::new();
    if !failed.is_empty() {
        let mut labels: Vec<&str> = failed.iter().map(|f| f.label.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        parts.push(format!(
            "Corrections: invalid claims detected ({}).",
            labels.join(", ")
        ));
        for f in failed {
            let at = f.line.map(|n| format!("line {n}: ")).unwrap_or_default();
            parts.push(format!(
                "- {at}{}: {}",
                one_line(&truncate(&f.raw, RAW_MAX)),
                one_line(&f.reason)
            ));
        }
    }
    for (title, cids) in [("Opened", opened), ("Closed", closed)] {
        if !cids.is_empty() {
            let mut cids = cids.to_vec();
            cids.sort_unstable();
            parts.push(format!("{title} commitments: {}.", cids.join(", ")));
        }
    }
    if let Some(r) = reflect {
        for (title, keys) in [
            ("Observations", &OBSERVATION_KEYS[..]),
            ("Corrections", &CORRECTION_KEYS[..]),
            ("Next", &NEXT_KEYS[..]),
        ] {
            let items: Vec<String> = keys
                .iter()
                .filter_map(|k| r.get(*k))
                .flat_map(items)
                .collect();
            if !items.is_empty() {
                let text = items.join("; ");
                let stop = if text.ends_with(['.', '!', '?']) {
                    ""
                } else {
                    "."
                };
                parts.push(format!("{title}: {text}{stop}"));
            }
        }
    }
    (!parts.is_empty()).then(|| parts.join("\n"))
}

/// The turn-delta reflection text from `(claim type or claim line, reason)` pairs, which carry
/// no line numbers: each failed claim's line is `- <first>: <reason>`. A first element that is
/// a whole `CLAIM:` line is summarised by its type. Otherwise as [`delta_text`].
pub fn delta_reflection_text(
    failed: &[(String, String)],
    opened: &[String],
    closed: &[String],
    reflect: Option<&Map<String, Value>>,
) -> Option<String> {
    let failed: Vec<FailedClaim> = failed
        .iter()
        .map(|(what, reason)| {
            let what_t = py_strip(what);
            let lbl = match what_t.strip_prefix("CLAIM:") {
                Some(rest) => rest
                    .split_once('=')
                    .map_or_else(|| "malformed".into(), |(t, _)| label(py_strip(t))),
                None => label(what_t),
            };
            FailedClaim {
                line: None,
                label: lbl,
                raw: what_t.into(),
                reason: reason.clone(),
            }
        })
        .collect();
    delta_text(&failed, opened, closed, reflect)
}

/// The items of one REFLECT value: a list's non-empty elements, or the value itself as one
/// item; nothing for the values Python finds false.
fn items(v: &Value) -> Vec<String> {
    match v {
        Value::Array(xs) => xs.iter().filter_map(item).collect(),
        v => item(v).into_iter().collect(),
    }
}

fn item(v: &Value) -> Option<String> {
    let text = match v {
        Value::Null | Value::Bool(false) => return None,
        Value::Array(a) if a.is_empty() => return None,
        Value::Object(o) if o.is_empty() => return None,
        Value::String(s) => one_line(s),
        // Compact JSON escapes the ASCII breaks but keeps U+0085, U+2028 and U+2029 raw, and
        // those break lines for `str.splitlines()` too.
        other => one_line(&serde_json::to_string(other).ok()?),
    };
    let t = py_strip(&text);
    (!t.is_empty()).then(|| t.to_string())
}

/// `s` with every run of line breaks replaced by one space.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_break = false;
    for c in s.chars() {
        if is_line_break(c) {
            if !in_break {
                out.push(' ');
            }
            in_break = true;
        } else {
            out.push(c);
            in_break = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn s(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn reference_example_reads_the_same() {
        let r = obj(json!({"observations": ["o1"], "next": ["n1"]}));
        let failed = [(
            "event_existence".to_string(),
            "event 999 does not exist".to_string(),
        )];
        assert_eq!(
            delta_reflection_text(&failed, &s(&["2def866b"]), &[], Some(&r)).unwrap(),
            "Corrections: invalid claims detected (event_existence).\n\
             - event_existence: event 999 does not exist\n\
             Opened commitments: 2def866b.\n\
             Observations: o1.\n\
             Next: n1."
        );
    }

    #[test]
    fn per_claim_lines_carry_line_and_claim() {
        let m = crate::marker::parse(
            "hi\nCLAIM:event_existence={\"id\":999}\nCLAIM: {\"intent\": \"x\"}\nCLAIM:zeta={}\nCLAIM:event_existence={\"id\":\"abc\"}",
        );
        let mut failed = Vec::new();
        for c in &m.claims {
            match &c.value {
                Err(e) => failed.push(FailedClaim::from_parse_error(c.line, e)),
                Ok(cl) => {
                    let f = match cl.claim_type.as_str() {
                        "zeta" => ClaimFailure::Unsupported,
                        _ if cl.data["id"] == "abc" => {
                            ClaimFailure::InvalidData("id \"abc\" is not an integer".into())
                        }
                        _ => ClaimFailure::NotFound("event 999 does not exist".into()),
                    };
                    failed.push(FailedClaim::from_failure(c.line, cl, &f));
                }
            }
        }
        let text = delta_text(&failed, &[], &s(&["b", "a"]), None).unwrap();
        assert_eq!(
            text,
            "Corrections: invalid claims detected (event_existence, malformed, zeta).\n\
             - line 2: CLAIM:event_existence={\"id\":999}: event 999 does not exist\n\
             - line 3: CLAIM: {\"intent\": \"x\"}: malformed claim: no '=' (expected CLAIM:<type>=<json>)\n\
             - line 4: CLAIM:zeta={}: unsupported claim type (supported: event_existence, commitment_status, reference, name_change, identity_proposal, identity_ratify)\n\
             - line 5: CLAIM:event_existence={\"id\":\"abc\"}: invalid data: id \"abc\" is not an integer\n\
             Closed commitments: a, b."
        );
    }

    #[test]
    fn long_claim_lines_are_cut_at_120_characters() {
        let raw = format!("CLAIM:x={}", "é".repeat(200));
        let f = FailedClaim {
            line: Some(1),
            label: "x".into(),
            raw: raw.clone(),
            reason: "r".into(),
        };
        let text = delta_text(&[f], &[], &[], None).unwrap();
        let quoted = text.lines().nth(1).unwrap();
        assert_eq!(
            quoted,
            format!(
                "- line 1: {}...: r",
                raw.chars().take(120).collect::<String>()
            )
        );
    }

    #[test]
    fn string_values_are_one_item_not_characters() {
        // FORMATS.md §17 item 34: the reference wrote "Observations: o; n; e."
        let r =
            obj(json!({"observations": "one thing", "corrections": "fix\nit", "next": "done."}));
        assert_eq!(
            delta_text(&[], &[], &[], Some(&r)).unwrap(),
            "Observations: one thing.\nCorrections: fix it.\nNext: done."
        );
    }

    #[test]
    fn model_keys_count_as_observations() {
        let r = obj(
            json!({"note": "n", "insight": ["i1", "", null, 3], "observation": "o", "mood": "ok"}),
        );
        assert_eq!(
            delta_text(&[], &[], &[], Some(&r)).unwrap(),
            "Observations: o; i1; 3; n."
        );
        let r = obj(json!({"correction": {"a": 1}, "next": [true, false, []]}));
        assert_eq!(
            delta_text(&[], &[], &[], Some(&r)).unwrap(),
            "Corrections: {\"a\":1}.\nNext: true."
        );
    }

    #[test]
    fn nothing_to_say_is_none() {
        assert_eq!(delta_text(&[], &[], &[], None), None);
        let r = obj(json!({"mood": "fine", "observations": [], "next": ""}));
        assert_eq!(delta_reflection_text(&[], &[], &[], Some(&r)), None);
    }

    #[test]
    fn opened_cids_are_sorted_and_duplicates_kept() {
        assert_eq!(
            delta_text(&[], &s(&["e2eb5791", "2def866b", "e2eb5791"]), &[], None).unwrap(),
            "Opened commitments: 2def866b, e2eb5791, e2eb5791."
        );
    }

    #[test]
    fn pair_form_takes_claim_lines_too() {
        let failed = [
            (
                "CLAIM:event_existence={\"id\":9}".to_string(),
                "event 9 does not exist".to_string(),
            ),
            ("CLAIM: {\"a\":\"x=y\"}".to_string(), "bad".to_string()),
            ("CLAIM: no equals".to_string(), "bad".to_string()),
        ];
        assert_eq!(
            delta_reflection_text(&failed, &[], &[], None).unwrap(),
            "Corrections: invalid claims detected (event_existence, malformed).\n\
             - CLAIM:event_existence={\"id\":9}: event 9 does not exist\n\
             - CLAIM: {\"a\":\"x=y\"}: bad\n\
             - CLAIM: no equals: bad"
        );
    }
}
