//! The indexer behind an `index` tick (FORMATS.md §14.5, the reference's archivist): the
//! messages of the tick's batch (its evidence, at most [`BATCH`], read by id — a bounded read
//! whatever the ledger's size) go through the indexer's rule ([`crate::projection::indexing`]:
//! the concepts a message names or mentions are defined when new and bound to it, a reply's
//! concepts bound to the threads it opened, concepts that keep appearing together related,
//! the safe claim patterns made `claim_from_text`), and the events the rule plans are appended
//! as planned. The tick's meta records the rule (`index_rule`), so that `pmm-verify --deep`
//! recomputes every index tick with the rule it was written with.

use crate::canon;
use crate::event::{Event, Kind, Source};
use crate::projection::indexing::{self, Message};
use crate::session::{meta, Session};
use serde_json::{json, Value};

/// Messages one `index` tick takes.
pub const BATCH: usize = indexing::BATCH;

/// EventLog the messages `ids` (the tick's evidence) with the current rule
/// ([`indexing::RULE`]): the events [`indexing::plan`] derives, appended in its order.
pub(crate) fn append(s: &mut Session<'_, '_>, ids: &[i64]) -> crate::Result<()> {
    let mut read = Vec::new();
    for &id in ids.iter().take(BATCH) {
        if let Some(ev) = s.tx.get(id)? {
            read.push(ev);
        }
    }
    let batch: Vec<Message<'_>> = read
        .iter()
        .map(|e| Message {
            id: e.id,
            kind: &e.kind,
            content: &e.content,
        })
        .collect();
    let mirror = &s.p.mirror;
    let known = |cid: &str| mirror.open.contains_key(cid) || mirror.closed.contains_key(cid);
    let planned = indexing::plan(indexing::RULE, &s.p.concepts, &known, &batch).unwrap_or_default();
    for e in planned {
        s.put(e.kind, e.content, e.meta)?;
    }
    Ok(())
}

fn put_c(
    s: &mut Session<'_, '_>,
    kind: Kind,
    v: &Value,
    pairs: &[(&str, Value)],
) -> crate::Result<()> {
    let content = canon::built(v);
    s.put(kind, content, meta(pairs))?;
    Ok(())
}

/// CTL maintenance (FORMATS.md §8.12): the concept tokens each kind of the loop's own events
/// is evidence of, with the relation.
fn maintained(ev: &Event) -> Option<(&'static [&'static str], &'static str)> {
    let kernel = || {
        ev.meta_map()
            .is_ok_and(|m| Source::AutonomyKernel.is(m.get("source")))
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
pub(crate) fn maintain(s: &mut Session<'_, '_>, from: usize) -> crate::Result<()> {
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
        let id = crate::chain::Digest::of(canon::built(&v).as_bytes());
        let m = [
            ("binding_id", id.to_string().into()),
            ("source", Source::AutonomyKernel.into()),
        ];
        put_c(s, Kind::ConceptBindEvent, &v, &m)?;
    }
    Ok(())
}
