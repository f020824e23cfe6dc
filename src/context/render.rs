//! The context block and the system prompt a turn sends (SPEC §4 pmm-turn, FORMATS.md §9.7,
//! §10). The sections are the reference's, each only when it has content: Concepts, Threads,
//! Graph, the state lines ("Ledger so far …", "Retrieval window this turn …", identity, the
//! live self-model — dead in the reference, §17 item 25 — and open commitments), then the
//! Evidence. The rules text is ours: it states the ledger's rules and the marker protocol.

use super::select::Selection;
use crate::projection::mirror::Commitment;
use crate::projection::state::Projections;
use crate::projection::supersession::Supersession;
pub use crate::recall::concepts::mentioned_concepts;
use std::fmt::Write as _;

/// Evidence lines are cut to this many characters (the reference's 300).
pub const EVIDENCE_CHARS: usize = 300;
/// At most this many concepts are listed.
pub const MAX_CONCEPTS: usize = 12;
/// At most this many relations are listed per concept ("Linked to").
pub const MAX_LINKS: usize = 5;
/// At most this many open commitments are listed as threads.
pub const MAX_THREADS: usize = 8;
/// `text` cut to `n` characters, the last three replaced by `...` when it was longer.
pub fn truncate_chars(text: &str, n: usize) -> String {
    let mut s = String::new();
    push_truncated(&mut s, text, n);
    s
}

/// Appends [`truncate_chars`]`(text, n)` to `s` (no copy made on the way).
fn push_truncated(s: &mut String, text: &str, n: usize) {
    // ASCII up to the cut (most text): bytes are characters.
    if text.as_bytes()[..text.len().min(n.saturating_add(1))].is_ascii() {
        if text.len() <= n {
            s.push_str(text);
        } else {
            s.push_str(&text[..n.saturating_sub(3)]);
            s.push_str("...");
        }
        return;
    }
    if text.char_indices().nth(n).is_none() {
        s.push_str(text);
        return;
    }
    let cut = text
        .char_indices()
        .nth(n.saturating_sub(3))
        .map_or(text.len(), |(i, _)| i);
    s.push_str(&text[..cut]);
    s.push_str("...");
}

/// The context block for a turn: sections joined by a blank line, empty ones left out.
/// `head_id` is the ledger's newest event (the user's message).
pub fn context_block(p: &Projections, head_id: i64, sel: &Selection, user_text: &str) -> String {
    context_block_of(
        p,
        head_id,
        sel,
        user_text,
        crate::context::prompt::PROMPT_FORMAT,
    )
}

/// [`context_block`] as prompt format `format` renders it: from format 5 on, superseded
/// evidence is labelled and put after what is believed now ([`SUPERSEDED_FROM`]).
pub fn context_block_of(
    p: &Projections,
    head_id: i64,
    sel: &Selection,
    user_text: &str,
    format: i64,
) -> String {
    let open = p.mirror.open_in_order();
    let mut sections: Vec<String> = Vec::new();
    sections.extend(concepts_section(p, user_text));
    sections.extend(threads_section(&open));
    let (nodes, edges) = p.graph.size();
    if nodes >= 5 {
        sections.push(format!("## Graph\nGraph: {nodes} nodes, {edges} edges"));
    }
    state_lines(&mut sections, p, head_id, sel, &open);
    if !sel.events.is_empty() {
        // Before format 5 nothing was labelled: an older turn is rebuilt as it was sent.
        let corrections = (format >= SUPERSEDED_FROM).then_some(&p.supersession);
        sections.push(if sel.via.is_empty() {
            evidence(sel, corrections)
        } else {
            recalled_evidence(sel, corrections)
        });
    }
    sections.join("\n\n")
}

/// `## Concepts`: the concepts `user_text` mentions (at most [`MAX_CONCEPTS`]), each with its
/// definition cut to 60 characters and up to [`MAX_LINKS`] relations; `None` when none is
/// mentioned.
fn concepts_section(p: &Projections, user_text: &str) -> Option<String> {
    let concepts = mentioned_concepts(&p.concepts.all_tokens(), user_text);
    if concepts.is_empty() {
        return None;
    }
    let mut s = String::from("## Concepts");
    for tok in concepts.iter().take(MAX_CONCEPTS) {
        s.push_str("\n- ");
        s.push_str(tok);
        if let Some(d) = p
            .concepts
            .definition(tok)
            .filter(|d| !d.definition.is_empty())
        {
            s.push_str(": ");
            s.push_str(&truncate_chars(&d.definition, 60));
        }
        let linked: Vec<String> = p
            .concepts
            .relations_of(tok)
            .into_iter()
            .take(MAX_LINKS)
            .map(|(rel, other)| format!("{other} ({rel})"))
            .collect();
        if !linked.is_empty() {
            s.push_str("\n  Linked to: ");
            s.push_str(&linked.join(", "));
        }
    }
    Some(s)
}

/// `## Threads`: the open commitments in opening order (at most [`MAX_THREADS`]), each goal
/// cut to 80 characters; `None` when none is open.
fn threads_section(open: &[&Commitment]) -> Option<String> {
    if open.is_empty() {
        return None;
    }
    let mut s = String::from("## Threads");
    for c in open.iter().take(MAX_THREADS) {
        let goal = if c.text.is_empty() {
            "Unknown goal"
        } else {
            &c.text
        };
        s.push_str(&format!(
            "\n- {}: Active - {} (opened at event {})",
            c.cid,
            truncate_chars(goal, 80),
            c.opened_at
        ));
    }
    Some(s)
}

/// The state lines, in order: `Ledger so far …`, `Retrieval window this turn …` (when
/// something was selected), the identity, the live self-model, the open commitments by cid and
/// the internal goals, each only when it has content.
fn state_lines(
    sections: &mut Vec<String>,
    p: &Projections,
    head_id: i64,
    sel: &Selection,
    open: &[&Commitment],
) {
    sections.push(format!(
        "Ledger so far: events 1..{head_id} (total {head_id})"
    ));
    if let (Some(first), Some(last)) = (sel.events.first(), sel.events.last()) {
        sections.push(format!(
            "Retrieval window this turn: events {}..{} ({} events selected)",
            first.id,
            last.id,
            sel.events.len()
        ));
    }
    sections.extend(identity_line(p));
    sections.extend(self_model_line(p));
    if !open.is_empty() {
        let mut cids: Vec<&str> = open.iter().map(|c| c.cid.as_str()).collect();
        cids.sort_unstable();
        sections.push(format!("Open Commitments: {}", cids.join(", ")));
    }
    sections.extend(internal_goals(p));
}

/// `Identity: name: N; adopted: a, b`, either part only when known; `None` when neither is.
fn identity_line(p: &Projections) -> Option<String> {
    let id = &p.mirror.identity;
    if id.name.is_none() && id.adopted.is_empty() {
        return None;
    }
    let mut s = String::from("Identity:");
    if let Some(name) = &id.name {
        s.push_str(&format!(" name: {name}"));
    }
    if !id.adopted.is_empty() {
        if id.name.is_some() {
            s.push(';');
        }
        s.push_str(&format!(" adopted: {}", id.adopted.join(", ")));
    }
    Some(s)
}

/// `Recursive Self-Model:` with its tendencies (and knowledge gaps, when any); `None` until
/// the self-model has a tendency.
fn self_model_line(p: &Projections) -> Option<String> {
    let tendencies = p.rsm.tendencies();
    if tendencies.is_empty() {
        return None;
    }
    let t: Vec<String> = tendencies
        .iter()
        .map(|(k, v)| format!("{k} ({v})"))
        .collect();
    let gaps = p.rsm.knowledge_gaps();
    let mut s = format!("Recursive Self-Model:\n- Tendencies: {}", t.join(", "));
    if !gaps.is_empty() {
        s.push_str(&format!("\n- Gaps: {}", gaps.join(", ")));
    }
    Some(s)
}

/// `Internal goals: N worked; newest mc_… <goal> (closed at event N)`, once the kernel has
/// worked one (docs/autonomy.md, "Internal goals"), then `; open: mc_… <goal> (<cause>)` for
/// the goals that stay open until a thinking tick works them.
fn internal_goals(p: &Projections) -> Option<String> {
    let (worked, newest) = p.mirror.internal_goals_worked();
    let open = p.mirror.open_goals();
    let mut line = match newest {
        Some(newest) => format!(
            "Internal goals: {} worked; newest {} {} (closed at event {})",
            worked,
            newest.cid,
            newest.text,
            newest.closed_at.unwrap_or_default()
        ),
        None if open.is_empty() => return None,
        None => "Internal goals: 0 worked".to_string(),
    };
    for (i, c) in open.iter().enumerate() {
        line.push_str(if i == 0 { "; open: " } else { ", " });
        let cause = c.cause.as_deref().unwrap_or_default();
        let _ = write!(line, "{} {} ({cause})", c.cid, c.text);
    }
    Some(line)
}

/// The first prompt format that labels superseded evidence.
pub const SUPERSEDED_FROM: i64 = 5;

/// The label of a superseded event in the Evidence section: `, superseded by [B] (SOURCE,
/// TS)`, and `, now [C]` when B was corrected in turn.
fn superseded_label(s: &Supersession, id: i64) -> Option<String> {
    let c = s.corrected(id)?;
    let mut label = format!(", superseded by [{}] ({}, {})", c.by, c.source, c.ts);
    let now = s.current(id);
    if now != c.by {
        let _ = write!(label, ", now [{now}]");
    }
    Some(label)
}

/// The reference's Evidence section: `[id] kind: text`, text cut at 300 characters; a
/// superseded event (with `corrections`) is labelled after its kind.
fn evidence(sel: &Selection, corrections: Option<&Supersession>) -> String {
    let mut s = String::from("## Evidence");
    for e in &sel.events {
        let label = corrections.and_then(|c| superseded_label(c, e.id));
        // Written in place: a prompt holds a line per selected event.
        let _ = write!(
            s,
            "\n[{}] {}{}: ",
            e.id,
            e.kind.as_str(),
            label.as_deref().unwrap_or("")
        );
        push_truncated(&mut s, &e.content, EVIDENCE_CHARS);
    }
    s
}

/// The Evidence section of whole-ledger recall: in conversation time, under a heading per
/// day, each event as `[id] HH:MM:SS kind: text`, the text verbatim up to
/// [`crate::recall::EVIDENCE_CHARS`], so that dates answer "when" questions. With
/// `corrections`, the superseded events are left out of that list and follow it under
/// `### Superseded`, each labelled with who corrected it and when: what is believed now
/// comes first.
fn recalled_evidence(sel: &Selection, corrections: Option<&Supersession>) -> String {
    let mut s = String::from(
        "## Evidence\nRecalled from the whole ledger for this message, oldest first: [event id] time, kind: text.",
    );
    let superseded = |id: i64| corrections.is_some_and(|c| c.corrected(id).is_some());
    let mut day = "";
    for e in sel.events.iter().filter(|e| !superseded(e.id)) {
        let (d, t) = e.ts.split_once('T').unwrap_or((e.ts.as_str(), ""));
        if d != day {
            s.push_str("\n### ");
            s.push_str(d);
            day = d;
        }
        let time = t.get(..8).unwrap_or(t);
        // Written in place: a prompt holds a line per recalled event.
        let _ = write!(s, "\n[{}] {time} {}: ", e.id, e.kind.as_str());
        push_truncated(&mut s, &e.content, crate::recall::EVIDENCE_CHARS);
    }
    if let Some(c) = corrections {
        superseded_evidence(&mut s, sel, c);
    }
    s
}

/// The `### Superseded` part of the recalled Evidence section (nothing when no selected
/// event is superseded): `[id] DAY TIME kind, superseded by [B] (SOURCE, TS): text`.
fn superseded_evidence(s: &mut String, sel: &Selection, c: &Supersession) {
    let mut heading = false;
    for e in &sel.events {
        let Some(label) = superseded_label(c, e.id) else {
            continue;
        };
        if !heading {
            s.push_str(
                "\n### Superseded (corrected later: the events above are what is believed now)",
            );
            heading = true;
        }
        let (d, t) = e.ts.split_once('T').unwrap_or((e.ts.as_str(), ""));
        let time = t.get(..8).unwrap_or(t);
        let _ = write!(s, "\n[{}] {d} {time} {}{label}: ", e.id, e.kind.as_str());
        push_truncated(s, &e.content, crate::recall::EVIDENCE_CHARS);
    }
}

/// The rules after their opening sentences, the same in every prompt format.
macro_rules! rules_after_the_ledger {
    () => {
        " The context above is drawn from it; event ids \
appear in square brackets. When you state something about yourself or the past, point to the \
event ids it rests on; if the ledger does not show it, say that you do not know.

Answer the user in plain, natural language first. After your answer you may add control lines. \
A control line stands on its own line, is not part of the prose, and begins with its keyword and a \
colon at the very start of the line (no dash, quote or other markup before it). The keywords:
- COMMIT: followed by what you will do. Opens a commitment (its id is the first 8 hex digits of the sha1 of the text).
- CLOSE: followed by a commitment id. Closes one of the open commitments listed above.
- CLAIM: followed by <type>=<json>. Records a checked claim; types: event_existence {\"id\":N}, \
reference {\"id\":N}, commitment_status {\"cid\":\"…\",\"open\":true|false}, name_change {\"new_name\":\"…\"}, \
identity_proposal {\"token\":\"…\",\"description\":\"…\"}, identity_ratify {\"token\":\"…\"}.
- REFLECT: followed by a JSON object. A reflection, e.g. {\"observations\":[\"…\"],\"corrections\":[\"…\"],\"next\":[\"…\"]}.
- REF: followed by <ledger path>#<event id>. Cites an event of another ledger (read only).
For example, to promise a report, end the reply with a line that reads: COMMIT: send the report
A claim that does not check out is recorded as a correction, so claim only what the ledger shows. \
An identity token is adopted once it has been both proposed and ratified. Never answer with \
control lines alone."
    };
}

/// The rules as this build writes them (prompt format 4 on, `context::prompt::PROMPT_FORMAT`):
/// what the ledger is and how to write to it. Our own words.
pub const RULES: &str = concat!(
    "You are an agent whose whole memory is a ledger: an append-only, hash-chained list of \
events (messages, commitments, claims, reflections, summaries). Nothing outside the ledger is \
part of you. Events are only ever appended, never edited; the one removal is an erasure, which \
takes an event's text out and is itself recorded as an event.",
    rules_after_the_ledger!()
);

/// The rules of prompt format 3, which said that nothing in the ledger can be changed or
/// deleted (an erasure takes an event's text out). Kept as they were: a format-3 turn's prompt
/// is rebuilt with the rules it was sent with.
pub const RULES_3: &str = concat!(
    "You are an agent whose whole memory is a ledger: an append-only, hash-chained list of \
events (messages, commitments, claims, reflections, summaries). Nothing outside the ledger is \
part of you, and nothing in it can be changed or deleted.",
    rules_after_the_ledger!()
);

/// The rules a prompt of `format` carried: [`RULES_3`] for format 3, else [`RULES`].
pub fn rules(format: i64) -> &'static str {
    if format == 3 {
        RULES_3
    } else {
        RULES
    }
}

/// The system prompt: the context block, a blank line, the rules (just the rules when the
/// context is empty).
pub fn system_prompt(context: &str) -> String {
    system_prompt_of(context, crate::context::prompt::PROMPT_FORMAT)
}

/// [`system_prompt`] with the rules of prompt format `format`.
pub fn system_prompt_of(context: &str, format: i64) -> String {
    let rules = rules(format);
    if context.is_empty() {
        rules.to_string()
    } else {
        format!("{context}\n\n{rules}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_counts_characters() {
        for n in 0..8 {
            for text in ["", "abc", "abcdé", "ééééé", "abcdefghij", "é😀é😀é😀é😀"]
            {
                let count = text.chars().count();
                let want = if count <= n {
                    text.to_string()
                } else {
                    text.chars().take(n.saturating_sub(3)).collect::<String>() + "..."
                };
                assert_eq!(truncate_chars(text, n), want, "{text} {n}");
            }
        }
        assert_eq!(truncate_chars("abc", 3), "abc");
        assert_eq!(truncate_chars("abcdé", 4), "a...");
        assert_eq!(truncate_chars("ééééé", 5), "ééééé");
    }

    #[test]
    fn concepts_match_by_substring_segment_or_creator_word() {
        let defined: Vec<String> = [
            "user.identity",
            "topic.stability_metrics",
            "ontology.entity",
            "x.kind",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            mentioned_concepts(
                &defined,
                "I am your creator; tell me about stability metrics"
            ),
            ["topic.stability_metrics", "user.identity"]
        );
        assert_eq!(
            mentioned_concepts(&defined, "what kind of entity?"),
            ["ontology.entity"]
        );
        assert!(mentioned_concepts(&defined, "nothing here").is_empty());
    }

    /// A model that repeats its instructions must not act on them: no line of the rules
    /// is a marker.
    #[test]
    fn the_rules_hold_no_marker_line() {
        let m = crate::marker::parse(RULES);
        assert_eq!(m, crate::marker::Markers::default(), "{m:?}");
        let m = crate::marker::parse(&system_prompt("Ledger so far: events 1..1 (total 1)"));
        assert_eq!(m, crate::marker::Markers::default(), "{m:?}");
        for k in ["COMMIT:", "CLOSE:", "CLAIM:", "REFLECT:", "REF:"] {
            assert!(RULES.contains(&format!("\n- {k} followed by")), "{k}");
        }
    }

    /// Format 3's rules are kept byte for byte (every format-3 prompt digest holds them); the
    /// current ones no longer claim that nothing in the ledger can be deleted.
    #[test]
    fn format_3_rules_are_kept_as_they_were() {
        use sha2::Digest as _;
        let d = format!("{:x}", sha2::Sha256::digest(RULES_3.as_bytes()));
        assert_eq!(
            d,
            "3b83ef6ac9475f25d7ecae3c0e04c8969dbe05370085d922de3f0cdafcc96a35"
        );
        assert_eq!(rules(3), RULES_3);
        assert_eq!(rules(crate::context::prompt::PROMPT_FORMAT), RULES);
        assert!(!RULES.contains("changed or deleted"));
        assert!(RULES.contains("erasure"));
        let m = crate::marker::parse(RULES_3);
        assert_eq!(m, crate::marker::Markers::default(), "{m:?}");
    }

    #[test]
    fn empty_ledger_context_has_only_the_ledger_line() {
        let p = Projections::default();
        let c = context_block(&p, 1, &Selection::default(), "hi");
        assert_eq!(c, "Ledger so far: events 1..1 (total 1)");
        assert!(system_prompt(&c).starts_with("Ledger so far"));
        assert!(system_prompt("").starts_with("You are an agent"));
    }
}
