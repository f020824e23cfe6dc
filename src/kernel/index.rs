//! The indexer behind an `index` tick (FORMATS.md §14.5, the reference's archivist): for each
//! message of the tick's batch (its evidence, at most [`BATCH`], read by id — a bounded read
//! whatever the ledger's size), the topics its words name become a `concept_bind_async`, and
//! the safe claim patterns a `claim_from_text`, each naming its source message. A topic token
//! the ledger has not defined is first defined (`concept_define`, a one-line definition naming
//! the message it was first met in), so every binding points at a defined concept.

use crate::canon;
use crate::event::{Event, Kind};
use crate::store::Reads;
use crate::turn::{meta, Sink};
use serde_json::{json, Value};

/// Messages one `index` tick takes.
pub const BATCH: usize = 16;

/// Keyword → topic token, with the token's one-line definition (the reference's fuzzy
/// concepts).
const TOPICS: [(&str, &str, &str); 14] = [
    (
        "python",
        "topic.programming.python",
        "The Python programming language",
    ),
    (
        "code",
        "topic.programming",
        "Writing and reading program code",
    ),
    (
        "coding",
        "topic.programming",
        "Writing and reading program code",
    ),
    (
        "memory",
        "topic.system.memory",
        "Memory: what is kept and recalled",
    ),
    (
        "bug",
        "topic.system.issue",
        "A defect, error or problem in a system",
    ),
    (
        "error",
        "topic.system.issue",
        "A defect, error or problem in a system",
    ),
    ("slow", "metric.performance", "How fast something runs"),
    ("fast", "metric.performance", "How fast something runs"),
    ("linux", "topic.os.linux", "The Linux operating system"),
    ("ubuntu", "topic.os.linux", "The Linux operating system"),
    ("arch", "topic.os.linux", "The Linux operating system"),
    ("goal", "topic.planning", "Goals, plans and what comes next"),
    ("plan", "topic.planning", "Goals, plans and what comes next"),
    (
        "plans",
        "topic.planning",
        "Goals, plans and what comes next",
    ),
];

/// Words that make a message too uncertain for a claim.
const HEDGES: [&str; 10] = [
    "might", "maybe", "could", "should", "would", "think", "guess", "wish", "probably", "possibly",
];

const SOURCE: &str = "autonomy_kernel.indexer";

/// Lowercase words, with `.,!?;:()[]"'` as spaces (§14.5).
fn words(text: &str) -> Vec<String> {
    let cleaned: String = text
        .to_lowercase()
        .chars()
        .map(|c| if ".,!?;:()[]\"'".contains(c) { ' ' } else { c })
        .collect();
    cleaned.split_whitespace().map(str::to_string).collect()
}

/// The topic tokens of a message, sorted and unique.
pub fn topics(text: &str) -> Vec<&'static str> {
    let w = words(text);
    let mut t: Vec<&str> = TOPICS
        .iter()
        .filter(|(k, _, _)| w.iter().any(|x| x == k))
        .map(|(_, tok, _)| *tok)
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}

/// The safe claims of a message: `(claim_type, confidence, value)` for "my name is X",
/// "i live in A \[B \[C\]\]" and "i use X"; none when the message hedges.
pub fn claims(text: &str) -> Vec<(&'static str, f64, String)> {
    let w = words(text);
    if w.iter().any(|x| HEDGES.contains(&x.as_str())) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for i in 0..w.len() {
        let at = |j: usize| w.get(i + j).map(String::as_str);
        if (at(0), at(1), at(2)) == (Some("my"), Some("name"), Some("is")) {
            if let Some(x) = at(3) {
                out.push(("user.identity.name", 0.95, x.to_string()));
            }
        }
        if (at(0), at(1), at(2)) == (Some("i"), Some("live"), Some("in")) && at(3).is_some() {
            let place: Vec<&str> = (3..6).filter_map(at).collect();
            out.push(("user.location", 0.9, place.join(" ")));
        }
        if (at(0), at(1)) == (Some("i"), Some("use")) {
            if let Some(x) = at(2) {
                out.push(("user.tool_usage", 0.9, x.to_string()));
            }
        }
    }
    out
}

fn definition_of(token: &str) -> &'static str {
    TOPICS
        .iter()
        .find(|(_, t, _)| *t == token)
        .map_or("", |(_, _, d)| *d)
}

/// Indexes the messages `ids` (the tick's evidence): definitions first, then one
/// `concept_bind_async` per message with topics, then its claims.
pub(crate) fn append(s: &mut Sink<'_, '_>, ids: &[i64]) -> crate::Result<()> {
    for &id in ids.iter().take(BATCH) {
        let Some(ev) = s.batch.get(id)? else {
            continue;
        };
        if !matches!(ev.kind, Kind::UserMessage | Kind::AssistantMessage) {
            continue;
        }
        index_message(s, &ev)?;
    }
    Ok(())
}

fn put_c(
    s: &mut Sink<'_, '_>,
    kind: Kind,
    v: &Value,
    pairs: &[(&str, Value)],
) -> crate::Result<()> {
    let content = canon::to_string(v).unwrap_or_default();
    s.put(kind, content, meta(pairs))?;
    Ok(())
}

fn index_message(s: &mut Sink<'_, '_>, ev: &Event) -> crate::Result<()> {
    let tokens = topics(&ev.content);
    for tok in &tokens {
        if s.p.concepts.definition(tok).is_some() {
            continue;
        }
        let def = json!({
            "attributes": {}, "concept_kind": "topic", "definition": definition_of(tok),
            "token": tok, "version": 1,
        });
        let id = crate::chain::Digest::of(canon::to_string(&def).unwrap_or_default().as_bytes());
        let m = [
            ("concept_id", id.to_string().into()),
            ("source", SOURCE.into()),
            ("source_event", ev.id.into()),
        ];
        put_c(s, Kind::ConceptDefine, &def, &m)?;
    }
    let m = || [("origin", Value::from("async")), ("source", SOURCE.into())];
    if !tokens.is_empty() {
        let v = json!({"confidence": 0.75, "event_id": ev.id, "relation": "inferred_topic", "tokens": tokens});
        put_c(s, Kind::ConceptBindAsync, &v, &m())?;
        bind_threads(s, ev, &tokens)?;
    }
    for (claim_type, confidence, value) in claims(&ev.content) {
        let evidence: String = ev.content.chars().take(50).collect();
        let v = json!({
            "claim_type": claim_type, "confidence": confidence, "evidence_text": evidence,
            "source_event_id": ev.id, "value": value,
        });
        put_c(s, Kind::ClaimFromText, &v, &m())?;
    }
    Ok(())
}

/// The thread backfill (the reference's `backfill_concept_thread_bindings`): a reply's topics
/// are bound to the commitments its `COMMIT:` lines opened (the threads that hold the reply),
/// one `concept_bind_thread` per token the thread does not have yet.
fn bind_threads(s: &mut Sink<'_, '_>, ev: &Event, tokens: &[&str]) -> crate::Result<()> {
    if ev.kind != Kind::AssistantMessage {
        return Ok(());
    }
    for c in crate::marker::parse(&ev.content).commits {
        let cid = crate::projection::mirror::commitment_cid(&c.value);
        let known = s.p.mirror.open.contains_key(&cid) || s.p.mirror.closed.contains_key(&cid);
        if !known {
            continue;
        }
        for tok in tokens {
            if s.p.concepts.is_bound_to_thread(tok, &cid) {
                continue;
            }
            let v = json!({"cid": cid, "relation": "relevant_to", "tokens": [tok]});
            put_c(
                s,
                Kind::ConceptBindThread,
                &v,
                &[("source", BACKFILL.into())],
            )?;
        }
    }
    Ok(())
}

/// The source of the thread backfill's bindings, as the reference names it.
const BACKFILL: &str = "indexer.backfill";

/// CTL maintenance (FORMATS.md §8.12): the concept tokens each kind of the loop's own events
/// is evidence of, with the relation.
fn maintained(ev: &Event) -> Option<(&'static [&'static str], &'static str)> {
    let kernel = || {
        ev.meta_map().ok().and_then(|m| {
            m.get("source")
                .and_then(Value::as_str)
                .map(|s| s == "autonomy_kernel")
        }) == Some(true)
    };
    Some(match ev.kind {
        Kind::StabilityMetrics => (
            &[
                "metric.stability_score",
                "topic.stability_metrics",
                "topic.system_maturity",
            ][..],
            "evidence",
        ),
        Kind::CoherenceCheck => (
            &["metric.coherence_score", "topic.coherence"][..],
            "evidence",
        ),
        Kind::PolicyUpdate => (
            &[
                "policy.stability_v2",
                "governance.commitment_discipline",
                "topic.governance_thread",
            ][..],
            "policy_update",
        ),
        Kind::MetaPolicyUpdate => (
            &[
                "governance.ontology_consistency",
                "policy.ledger_truth_criterion",
            ][..],
            "meta_policy_update",
        ),
        Kind::SummaryUpdate => (
            &["topic.identity_evolution", "governance.identity_integrity"][..],
            "summary_state",
        ),
        Kind::Reflection if kernel() => (
            &["topic.autonomy_behavior", "governance.reflection_budget"][..],
            "reflection",
        ),
        _ => return None,
    })
}

/// CTL maintenance over the tick's events from `from` on: each of the loop's own events is
/// bound (`concept_bind_event`, weight 1.0, source `autonomy_kernel`) to the tokens of its
/// kind that the ledger defines and that are not bound to it yet. Nothing is defined here:
/// on a ledger without those concepts nothing is bound, as in the reference.
pub(crate) fn maintain(s: &mut Sink<'_, '_>, from: usize) -> crate::Result<()> {
    let events: Vec<Event> = s.events[from..].to_vec();
    for ev in &events {
        let Some((tokens, relation)) = maintained(ev) else {
            continue;
        };
        let bound = s.p.concepts.concepts_for_event(ev.id);
        let tokens: Vec<&str> = tokens
            .iter()
            .copied()
            .filter(|t| s.p.concepts.definition(t).is_some() && !bound.iter().any(|b| b == t))
            .collect();
        if tokens.is_empty() {
            continue;
        }
        let v = json!({"event_id": ev.id, "relation": relation, "tokens": tokens, "weight": 1.0});
        let id = crate::chain::Digest::of(canon::to_string(&v).unwrap_or_default().as_bytes());
        let m = [
            ("binding_id", id.to_string().into()),
            ("source", "autonomy_kernel".into()),
        ];
        put_c(s, Kind::ConceptBindEvent, &v, &m)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_and_safe_claims() {
        assert_eq!(
            topics("My Python code is slow; a memory bug?"),
            vec![
                "metric.performance",
                "topic.programming",
                "topic.programming.python",
                "topic.system.issue",
                "topic.system.memory"
            ]
        );
        assert_eq!(
            claims("Hi! My name is Ada. I live in New York City now, and I use Arch."),
            vec![
                ("user.identity.name", 0.95, "ada".to_string()),
                ("user.location", 0.9, "new york city".to_string()),
                ("user.tool_usage", 0.9, "arch".to_string()),
            ]
        );
        assert!(
            claims("I think my name is Bob").is_empty(),
            "a hedge: no claim"
        );
    }
}
