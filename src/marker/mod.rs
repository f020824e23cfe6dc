//! Markers in a model reply (FORMATS.md §3): one line rule for every consumer — the turn
//! ([`parse`]), the event graph ([`commit_texts`]), and what the chat and the Markdown export
//! show of a reply ([`is_marker_line`], [`could_become_marker`]).
//!
//! The reference parses replies with CPython's string methods, whose character sets differ from
//! Rust's `lines` and `trim` (`\r` alone, `\x1c`, `\u2028` break lines; `\x1c`-`\x1f` are
//! whitespace). Getting these wrong changes which commitments a reply opens, hence the cids and
//! the ledger's hashes, so every marker parser splits and strips with [`crate::pystr`]'s
//! `splitlines` and `strip` (re-exported here, FORMATS.md §1.11).
//!
//! [`parse`], the turn's parser, deliberately differs from the reference in four ways (the
//! first is the line rule every consumer shares):
//!
//! - **Indented markers count.** A line's leading whitespace (Python `isspace`) is skipped
//!   before the prefix test, so ` COMMIT: x` and `\tCLAIM:…` are markers. The reference
//!   requires column 0 and silently ignored such lines (gemma id 1086); models indent, and a
//!   marker the model plainly meant should not vanish. Prefixes stay case-sensitive, and a
//!   marker must still begin its line: `I will COMMIT: x`, `- COMMIT: x` and `**COMMIT:**` are
//!   prose. The reference ledgers have no indented `COMMIT:` line, so the event graph that
//!   [`commit_texts`] builds for them is the reference's.
//! - **Markers inside fenced code blocks count**, as in the reference: models often wrap their
//!   whole reply, or just the marker lines, in a fence, and skipping fences would make a reply's
//!   effect depend on whether the model balanced its backticks.
//! - **Each `CLAIM:` line stands alone** (SPEC §4): a malformed line yields an error for that
//!   line only, instead of dropping every claim of the reply (FORMATS.md §17 item 11).
//! - **At most [`MAX_MARKERS`] of each kind count** (`COMMIT:`, `CLOSE:`, `CLAIM:`, `REF:`):
//!   one reply of 10,000 `COMMIT:` lines would otherwise write tens of thousands of events in
//!   one turn. The rest are counted in [`Markers::ignored`] (and in the turn's record), not
//!   acted on. The reference has no limit.

use crate::canon;
use serde_json::{Map, Value};

pub use crate::pystr::{is_line_break, is_space as is_py_space, splitlines, strip as py_strip};

/// The commitment texts of a reply (FORMATS.md §3.1), by the one marker rule [`parse`] uses:
/// for every line that starts, after optional indentation and case-sensitively, with
/// `COMMIT:`, the text after the first `COMMIT:`, Python-stripped; empty texts are dropped.
/// Duplicates are kept, in reply order (each opens its own event). The event graph reads
/// replies with it, so a commitment an indented line opened keeps the reply that opened it
/// (the reference accepted column 0 only; its own ledgers have no indented COMMIT lines, so
/// their graphs are unchanged).
pub fn commit_texts(reply: &str) -> Vec<String> {
    splitlines(reply)
        .into_iter()
        .filter_map(|line| marker_body(line).strip_prefix("COMMIT:"))
        .map(py_strip)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// A value found on one line of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<T> {
    /// 1-based line number, counting lines as Python's `str.splitlines()` does, so `\r\n`,
    /// `\r` and `\u2028` each end one line.
    pub line: usize,
    /// What the line holds.
    pub value: T,
}

/// A well-formed `CLAIM:<type>=<json>` line. Well-formed only: whether the claim is true is
/// for `crate::claim::validate` to say.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimMarker {
    /// The text between `CLAIM:` and the first `=`, Python-stripped (may be empty or a type
    /// pmm does not know).
    pub claim_type: String,
    /// The JSON after the first `=`: any JSON value, guaranteed to have a canonical form (so
    /// that a `claim` event can be written for it).
    pub data: Value,
    /// The whole line, Python-stripped (indentation and trailing whitespace removed), for
    /// messages.
    pub raw: String,
}

/// Why a `CLAIM:` line is not a claim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimParseError {
    /// No `=` after `CLAIM:` (typical model output: `CLAIM: {"intent": …}`).
    #[error("malformed claim: no '=' (expected CLAIM:<type>=<json>)")]
    MissingEquals {
        /// The whole line, Python-stripped.
        raw: String,
    },
    /// The text after the first `=` is not JSON, or JSON without a canonical form (NaN,
    /// `1e400`).
    #[error("malformed claim: data for '{claim_type}' is {error}{}",
        if claim_type.starts_with('{') { " (the '=' is inside the JSON: expected CLAIM:<type>=<json>)" } else { "" })]
    BadJson {
        /// The claim type (the text before the first `=`, stripped).
        claim_type: String,
        /// The whole line, Python-stripped.
        raw: String,
        /// What is wrong with the JSON.
        error: String,
    },
}

impl ClaimParseError {
    /// The line the error is about, Python-stripped.
    pub fn raw(&self) -> &str {
        match self {
            ClaimParseError::MissingEquals { raw } | ClaimParseError::BadJson { raw, .. } => raw,
        }
    }

    /// The claim type, when the line got as far as having one.
    pub fn claim_type(&self) -> Option<&str> {
        match self {
            ClaimParseError::MissingEquals { .. } => None,
            ClaimParseError::BadJson { claim_type, .. } => Some(claim_type),
        }
    }
}

/// The most markers of each kind (`COMMIT:`, `CLOSE:`, `CLAIM:`, `REF:`) one reply may act on;
/// the first ones in reply order count, the rest are ignored (and counted).
pub const MAX_MARKERS: usize = 64;

/// How many markers of each kind a reply had beyond [`MAX_MARKERS`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Ignored {
    /// `COMMIT:` lines ignored.
    pub commits: usize,
    /// `CLOSE:` lines ignored.
    pub closes: usize,
    /// `CLAIM:` lines ignored.
    pub claims: usize,
    /// `REF:` targets ignored.
    pub refs: usize,
}

impl Ignored {
    /// True when nothing was ignored.
    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    /// All ignored markers.
    pub fn total(&self) -> usize {
        self.commits + self.closes + self.claims + self.refs
    }
}

/// Keeps the first [`MAX_MARKERS`] of `v` and returns how many it dropped.
fn cap<T>(v: &mut Vec<T>) -> usize {
    let over = v.len().saturating_sub(MAX_MARKERS);
    v.truncate(MAX_MARKERS);
    over
}

/// Everything a reply asks for, in reply order, each with its line number.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Markers {
    /// `COMMIT:` texts, Python-stripped, empty ones dropped; duplicates kept (each opens its
    /// own event, as in the reference).
    pub commits: Vec<Line<String>>,
    /// `CLOSE:` cids, Python-stripped, empty ones dropped.
    pub closes: Vec<Line<String>>,
    /// Every `CLAIM:` line, each parsed on its own.
    pub claims: Vec<Line<Result<ClaimMarker, ClaimParseError>>>,
    /// The first `REFLECT:` line only (later ones are not tried, as in the reference): its JSON
    /// object, or why it is not one.
    pub reflect: Option<Line<Result<Map<String, Value>, ReflectParseError>>>,
    /// `REF: ` targets (the space is part of the prefix), Python-stripped, empty ones dropped.
    /// When the whole reply is a JSON object with a `refs` list, those strings instead, all on
    /// line 1 (see [`ref_targets`]).
    pub refs: Vec<Line<String>>,
    /// Markers beyond [`MAX_MARKERS`] of their kind, which the lists above leave out.
    pub ignored: Ignored,
}

/// The text of a marker line after its indentation: markers may be indented (see the module
/// documentation), so the prefix test runs on this.
/// The line prefixes of the marker protocol, as [`parse`] reads them.
pub const PREFIXES: [&str; 5] = ["COMMIT:", "CLOSE:", "CLAIM:", "REFLECT:", "REF: "];

/// Whether `line` is a marker line by the one rule [`parse`] uses: after optional (Python
/// whitespace) indentation, one of [`PREFIXES`], case-sensitive. The chat and the Markdown
/// export hide exactly these lines.
pub fn is_marker_line(line: &str) -> bool {
    let body = marker_body(line);
    PREFIXES.iter().any(|p| body.starts_with(p))
}

/// Whether the start of a line that is still arriving (a streamed reply) could yet become a
/// marker line.
pub fn could_become_marker(start: &str) -> bool {
    let body = marker_body(start);
    body.is_empty()
        || PREFIXES
            .iter()
            .any(|p| p.starts_with(body) || body.starts_with(p))
}

fn marker_body(line: &str) -> &str {
    line.trim_start_matches(is_py_space)
}

/// Parses a model reply into its markers. Never fails: a malformed `CLAIM:` or `REFLECT:` line
/// is recorded with the reason, everything else that is not a marker is prose.
///
/// Prefixes are case-sensitive and must begin the line, after optional indentation; the text
/// after a prefix is Python-stripped.
pub fn parse(reply: &str) -> Markers {
    let mut m = Markers::default();
    for (i, line) in splitlines(reply).into_iter().enumerate() {
        let n = i + 1;
        let body = marker_body(line);
        let nonempty = |rest: &str| {
            let t = py_strip(rest);
            (!t.is_empty()).then(|| Line {
                line: n,
                value: t.to_string(),
            })
        };
        if let Some(rest) = body.strip_prefix("COMMIT:") {
            m.commits.extend(nonempty(rest));
        } else if let Some(rest) = body.strip_prefix("CLOSE:") {
            m.closes.extend(nonempty(rest));
        } else if let Some(rest) = body.strip_prefix("CLAIM:") {
            m.claims.push(Line {
                line: n,
                value: parse_claim(py_strip(body), rest),
            });
        } else if let Some(rest) = body.strip_prefix("REFLECT:") {
            if m.reflect.is_none() {
                m.reflect = Some(Line {
                    line: n,
                    value: parse_reflect(rest),
                });
            }
        } else if let Some(rest) = body.strip_prefix("REF: ") {
            m.refs.extend(nonempty(rest));
        }
    }
    if let Some(targets) = json_refs(reply) {
        m.refs = targets
            .into_iter()
            .map(|value| Line { line: 1, value })
            .collect();
    }
    m.ignored = Ignored {
        commits: cap(&mut m.commits),
        closes: cap(&mut m.closes),
        claims: cap(&mut m.claims),
        refs: cap(&mut m.refs),
    };
    m
}

/// [`parse`] for a reply to `prompt` (the system prompt it was sent): a marker line identical
/// (Python-stripped) to a marker line of the prompt is an echo, not the model's own marker —
/// a model that repeats its instructions or its context must not open, close or claim
/// anything by it. Such lines are left out (their line numbers stay as they were) and
/// counted: the second value.
pub fn parse_unechoed(reply: &str, prompt: &str) -> (Markers, usize) {
    let echoes: std::collections::HashSet<&str> = splitlines(prompt)
        .into_iter()
        .filter(|l| is_marker_line(l))
        .map(py_strip)
        .collect();
    let lines = splitlines(reply);
    let echoed = lines
        .iter()
        .filter(|l| is_marker_line(l) && echoes.contains(py_strip(l)))
        .count();
    if echoed == 0 {
        return (parse(reply), 0);
    }
    let kept: Vec<&str> = lines
        .into_iter()
        .map(|l| {
            if is_marker_line(l) && echoes.contains(py_strip(l)) {
                ""
            } else {
                l
            }
        })
        .collect();
    (parse(&kept.join("\n")), echoed)
}

/// Parses the part of a claim line after `CLAIM:`; `raw` is the whole line for messages.
fn parse_claim(raw: &str, rest: &str) -> Result<ClaimMarker, ClaimParseError> {
    let Some((claim_type, json)) = rest.split_once('=') else {
        return Err(ClaimParseError::MissingEquals { raw: raw.into() });
    };
    let claim_type = py_strip(claim_type).to_string();
    // JSON whitespace around the value is what json.loads tolerates; the wider Python set
    // (a trailing no-break space, say) is tolerated too because it cannot change the value.
    let json = py_strip(json);
    let bad = |error: String| ClaimParseError::BadJson {
        claim_type: claim_type.clone(),
        raw: raw.into(),
        error,
    };
    let data: Value =
        serde_json::from_str(json).map_err(|e| bad(canon::explain_json_error(json, &e)))?;
    // The claim event's content holds the canonical form, so a value without one (1e400) is
    // refused here, where the model can be told, rather than when the event is written.
    canon::to_string(&data).map_err(|e| bad(e.to_string()))?;
    Ok(ClaimMarker {
        claim_type,
        data,
        raw: raw.into(),
    })
}

/// Why a `REFLECT:` line is not a reflection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReflectParseError {
    /// JSON, but not an object; the type it is.
    #[error("REFLECT must be a JSON object, not {0}")]
    NotAnObject(&'static str),
    /// Not JSON (explained in the user's terms).
    #[error("{0}")]
    NotJson(String),
}

/// Parses the part of a `REFLECT:` line after the prefix: a JSON object, or why not.
fn parse_reflect(rest: &str) -> Result<Map<String, Value>, ReflectParseError> {
    let json = py_strip(rest);
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ReflectParseError::NotAnObject(canon::type_name(&other))),
        Err(e) => Err(ReflectParseError::NotJson(canon::explain_json_error(
            json, &e,
        ))),
    }
}

/// The strings of a `refs` list, when `content` as a whole is a JSON object that has one.
fn json_refs(content: &str) -> Option<Vec<String>> {
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(content) else {
        return None;
    };
    let Some(Value::Array(items)) = obj.get("refs") else {
        return None;
    };
    Some(
        items
            .iter()
            .filter_map(Value::as_str)
            .map(py_strip)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

/// The `REF:` targets of a reply or a reflection's content (FORMATS.md §3.8): when the whole
/// content is a JSON object with a `refs` list, its strings (other items skipped); otherwise
/// the `REF: ` lines (prefix with the space, optional indentation as in [`parse`]), each
/// Python-stripped. Empty targets are dropped. Targets are not checked here; see
/// `crate::claim::parse_ref`.
pub fn ref_targets(content: &str) -> Vec<String> {
    if let Some(targets) = json_refs(content) {
        return targets;
    }
    splitlines(content)
        .into_iter()
        .filter_map(|line| marker_body(line).strip_prefix("REF: "))
        .map(py_strip)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_marker_lines_are_left_out_and_counted() {
        let prompt =
            "## Evidence\n[3] assistant_message: hi\nCOMMIT: old promise\nRules\n  CLOSE: abc";
        let reply = "Sure.\nCOMMIT: old promise\nCLOSE: abc \nCOMMIT: new promise\nCLAIM:x=1";
        let (m, echoed) = parse_unechoed(reply, prompt);
        assert_eq!(echoed, 2);
        assert_eq!(
            m.commits,
            vec![Line {
                line: 4,
                value: "new promise".to_string()
            }]
        );
        assert!(m.closes.is_empty());
        assert_eq!(m.claims[0].line, 5);
        // Nothing echoed: exactly parse.
        assert_eq!(parse_unechoed(reply, "no markers"), (parse(reply), 0));
    }

    #[test]
    fn splitlines_breaks_like_cpython() {
        assert_eq!(splitlines(""), Vec::<&str>::new());
        assert_eq!(splitlines("\n"), vec![""]);
        assert_eq!(splitlines("a\nb\n"), vec!["a", "b"]);
        assert_eq!(splitlines("a\r\nb\rc\n\nd"), vec!["a", "b", "c", "", "d"]);
        assert_eq!(splitlines("a\r\rb"), vec!["a", "", "b"]);
        assert_eq!(
            splitlines("a\x0bb\x0cc\x1cd\x1de\x1ef\u{85}g\u{2028}h\u{2029}i"),
            vec!["a", "b", "c", "d", "e", "f", "g", "h", "i"]
        );
        // \x1f is whitespace to Python but not a line break.
        assert_eq!(splitlines("a\x1fb"), vec!["a\x1fb"]);
        assert_eq!(splitlines("é😀\u{2028}"), vec!["é😀"]);
    }

    #[test]
    fn strip_uses_python_isspace() {
        assert_eq!(py_strip(" \t\x1c\x1d\x1e\x1fx y\u{a0}\u{3000}\r\n"), "x y");
        assert_eq!(py_strip("\u{200b}x"), "\u{200b}x"); // zero width space is not space
        assert_eq!(py_strip("   "), "");
    }

    #[test]
    fn commit_lines_follow_the_one_marker_rule() {
        let reply = "Hello\nCOMMIT: first  \n COMMIT: indented\ncommit: lower (ignored)\nCOMMIT:\nCOMMIT:   \nCOMMIT:second COMMIT: keeps the rest\nI will COMMIT: not this";
        assert_eq!(
            commit_texts(reply),
            vec!["first", "indented", "second COMMIT: keeps the rest"]
        );
        let parsed: Vec<String> = parse(reply).commits.into_iter().map(|l| l.value).collect();
        assert_eq!(
            commit_texts(reply),
            parsed,
            "one rule for the turn and the graph"
        );
    }

    #[test]
    fn commit_lines_split_on_crlf_and_unicode_breaks() {
        assert_eq!(
            commit_texts("x\r\nCOMMIT: a\r\nCOMMIT: b\u{2028}COMMIT: c\x1cCOMMIT: d\x1f"),
            vec!["a", "b", "c", "d"]
        );
        // A duplicate is kept: it opens a second event with the same cid.
        assert_eq!(commit_texts("COMMIT: a\nCOMMIT: a"), vec!["a", "a"]);
        assert_eq!(
            commit_texts("COMMIT: apply_ontological_directives  "),
            vec!["apply_ontological_directives"]
        );
    }

    fn texts(lines: &[Line<String>]) -> Vec<(usize, &str)> {
        lines.iter().map(|l| (l.line, l.value.as_str())).collect()
    }

    #[test]
    fn parse_finds_every_marker_with_its_line() {
        let reply = "Hello.\nCOMMIT: write tests\nCLOSE: 2def866b\nCLAIM:event_existence={\"id\": 3}\nREFLECT:{\"observations\":[\"o1\"]}\nREF: ../other.db#47\nbye";
        let m = parse(reply);
        assert_eq!(texts(&m.commits), [(2, "write tests")]);
        assert_eq!(texts(&m.closes), [(3, "2def866b")]);
        assert_eq!(m.claims.len(), 1);
        assert_eq!(m.claims[0].line, 4);
        let c = m.claims[0].value.as_ref().unwrap();
        assert_eq!(c.claim_type, "event_existence");
        assert_eq!(c.data, serde_json::json!({"id": 3}));
        assert_eq!(c.raw, "CLAIM:event_existence={\"id\": 3}");
        let r = m.reflect.unwrap();
        assert_eq!(r.line, 5);
        assert_eq!(r.value.unwrap()["observations"], serde_json::json!(["o1"]));
        assert_eq!(texts(&m.refs), [(6, "../other.db#47")]);
    }

    #[test]
    fn parse_counts_lines_like_splitlines() {
        let reply = "a\r\nCOMMIT: one\r\n\r\nCLOSE: c1\u{2028}COMMIT: two\rCOMMIT: three\x0cCLAIM:name_change={\"new_name\":\"Echo\"}\r\n";
        let m = parse(reply);
        assert_eq!(texts(&m.commits), [(2, "one"), (5, "two"), (6, "three")]);
        assert_eq!(texts(&m.closes), [(4, "c1")]);
        assert_eq!(m.claims[0].line, 7);
        assert!(m.claims[0].value.is_ok());
    }

    #[test]
    fn indented_markers_count_prose_does_not() {
        // Deliberate difference from the reference (column 0 only): models indent.
        let reply = "  COMMIT: spaced\n\tCLOSE: tabbed\n \u{a0}CLAIM:reference={\"id\":1}\n    REF: x.db#1\nI will COMMIT: not this\n- COMMIT: nor this\n**COMMIT:** nor this\ncommit: lower\nClaim: {\"a\":1}\nREF:x.db#2\nmid REF: x.db#3";
        let m = parse(reply);
        assert_eq!(texts(&m.commits), [(1, "spaced")]);
        assert_eq!(texts(&m.closes), [(2, "tabbed")]);
        assert_eq!(m.claims.len(), 1);
        assert_eq!(
            m.claims[0].value.as_ref().unwrap().raw,
            "CLAIM:reference={\"id\":1}"
        );
        assert_eq!(texts(&m.refs), [(4, "x.db#1")]);
        // commit_texts (the graph's reader) follows the same rule.
        assert_eq!(commit_texts(reply), ["spaced"]);
    }

    #[test]
    fn markers_in_code_fences_count() {
        let m = parse("Here:\n```\nCOMMIT: fenced\nCLAIM:event_existence={\"id\":2}\n```");
        assert_eq!(texts(&m.commits), [(3, "fenced")]);
        assert_eq!(m.claims[0].line, 4);
    }

    #[test]
    fn empty_markers_are_dropped() {
        let m = parse("COMMIT:\nCOMMIT:   \nCLOSE:\t\nREF: \nREF:   \n");
        assert_eq!(m, Markers::default());
    }

    #[test]
    fn claim_lines_stand_alone() {
        let reply = "CLAIM: {\"intent\": \"x\"}\nCLAIM:event_existence={\"id\":1}\nCLAIM:intent=reflection,outcome=ok\nCLAIM: {\"a\":\"x=y\"}\nCLAIM:x=\nCLAIM:x=NaN\nCLAIM:x=1e400\nCLAIM: mood = [1, 2] \nCLAIM:t={\"k\":1}\u{a0}";
        let m = parse(reply);
        let lines: Vec<usize> = m.claims.iter().map(|c| c.line).collect();
        assert_eq!(lines, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let v = |i: usize| &m.claims[i].value;
        assert_eq!(
            v(0),
            &Err(ClaimParseError::MissingEquals {
                raw: "CLAIM: {\"intent\": \"x\"}".into()
            })
        );
        assert_eq!(v(1).as_ref().unwrap().claim_type, "event_existence");
        let Err(ClaimParseError::BadJson {
            claim_type, raw, ..
        }) = v(2)
        else {
            panic!("{:?}", v(2))
        };
        assert_eq!(
            (claim_type.as_str(), raw.as_str()),
            ("intent", "CLAIM:intent=reflection,outcome=ok")
        );
        let e = v(3).as_ref().unwrap_err();
        assert_eq!(e.claim_type(), Some("{\"a\":\"x"));
        assert!(e.to_string().contains("the '=' is inside the JSON"), "{e}");
        assert!(matches!(v(4), Err(ClaimParseError::BadJson { .. })));
        assert!(v(5)
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("NaN is not valid JSON"));
        assert!(v(6)
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        let ok = v(7).as_ref().unwrap();
        assert_eq!(
            (ok.claim_type.as_str(), &ok.data),
            ("mood", &serde_json::json!([1, 2]))
        );
        assert_eq!(v(8).as_ref().unwrap().data, serde_json::json!({"k": 1}));
        assert_eq!(
            v(0).as_ref().unwrap_err().to_string(),
            "malformed claim: no '=' (expected CLAIM:<type>=<json>)"
        );
    }

    #[test]
    fn only_the_first_reflect_line_counts() {
        let m = parse("REFLECT: [1]\nREFLECT:{\"note\":\"n\"}");
        let r = m.reflect.unwrap();
        assert_eq!(r.line, 1);
        assert_eq!(r.value, Err(ReflectParseError::NotAnObject("an array")));
        assert_eq!(
            r.value.unwrap_err().to_string(),
            "REFLECT must be a JSON object, not an array"
        );
        let m = parse("x\nREFLECT: {bad\nREFLECT:{}");
        let r = m.reflect.unwrap();
        assert_eq!(r.line, 2);
        assert!(r
            .value
            .unwrap_err()
            .to_string()
            .starts_with("not valid JSON"));
        let m = parse("  REFLECT: {\"next\": \"n\"} ");
        assert_eq!(m.reflect.unwrap().value.unwrap()["next"], "n");
        assert_eq!(parse("no markers").reflect, None);
    }

    #[test]
    fn ref_targets_from_lines_or_a_json_refs_list() {
        assert_eq!(
            ref_targets("text\nREF: a.db#1 \n REF: b.db#2\nREF:c.db#3"),
            ["a.db#1", "b.db#2"]
        );
        assert_eq!(
            ref_targets(
                " {\"intent\":\"x\",\"refs\":[\"../other_pmm.db#47\", 3, \" b#2 \", \"\"]}\n"
            ),
            ["../other_pmm.db#47", "b#2"]
        );
        // A JSON object whose refs is not a list falls back to lines (there are none).
        assert!(ref_targets("{\"refs\":\"a#1\"}").is_empty());
        assert!(ref_targets("").is_empty());
        let m = parse("{\"refs\":[\"a.db#1\"]}");
        assert_eq!(texts(&m.refs), [(1, "a.db#1")]);
    }
}
