//! `--deep` recomputes every retention erasure ([`crate::kernel::retention`]): the erasure's
//! `meta.retention` names the pass's slot (and interval), the rule and the cutoff; the rule
//! must be one of the retention policy in force before it, the cutoff the slot's time less the
//! rule's age, the erased event older than the cutoff and of the rule's kind. The erased
//! event's `meta.source` is gone with its meta, so a source rule's match is not rechecked.
//! Events seen in the erased form are remembered by id, ts and kind only (a few bytes each).

use crate::event::config::{retention_rules, RetentionRule};
use crate::event::{Event, Kind, Seen};
use crate::kernel::{retention, Slot};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The fold: the retention policy so far and the events seen erased.
#[derive(Debug, Default)]
pub struct RetentionCheck {
    rules: Option<Vec<RetentionRule>>,
    erased: BTreeMap<i64, (String, Kind)>,
    /// Retention erasures checked.
    pub checked: u64,
}

/// One difference: what, expected, found.
pub type Difference = (String, Value, Value);

impl RetentionCheck {
    /// An event in the erased form.
    pub fn erased(&mut self, ev: &Event) {
        self.erased.insert(ev.id, (ev.ts.clone(), ev.kind.clone()));
    }

    /// Folds one event; for a retention erasure, what differs from the recomputation.
    pub fn check(&mut self, s: &Seen<'_>) -> Vec<Difference> {
        match s.ev.kind {
            Kind::Config => {
                if let Some(rules) = retention_rules(&s.ev.content) {
                    self.rules = rules.ok();
                }
                Vec::new()
            }
            Kind::Erasure => match s.meta().and_then(|m| m.get("retention")) {
                Some(r) => {
                    self.checked += 1;
                    let m = s.meta_or_empty();
                    let erased = m.get("erased_id").and_then(Value::as_i64);
                    let mut out = self.recompute(r, erased, m.get("erased_kind"));
                    out.extend(content_differs(&s.ev.content, erased, m.get("erased_kind")));
                    out
                }
                None => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    fn recompute(&self, r: &Value, erased: Option<i64>, kind: Option<&Value>) -> Vec<Difference> {
        let mut out = Vec::new();
        let n = |k: &str| r.get(k).and_then(Value::as_i64);
        let rule = n("rule")
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| self.rules.as_ref()?.get(i));
        let (Some(slot), Some(rule)) = (n("slot"), rule) else {
            let found = r.get("rule").cloned().unwrap_or_default();
            out.push((
                "erasure.meta.retention.rule: a rule of the retention policy in force".into(),
                json!("a rule"),
                found,
            ));
            return out;
        };
        let interval = n("interval").unwrap_or(crate::formats::slot::INTERVAL_SECS);
        let cutoff = retention::cutoff(&Slot::new(slot, interval), rule);
        let found = r.get("cutoff").cloned().unwrap_or_default();
        if found.as_str() != Some(cutoff.as_str()) {
            out.push(("erasure.meta.retention.cutoff".into(), json!(cutoff), found));
        }
        if let Some(k) = &rule.kind {
            if kind.and_then(Value::as_str) != Some(k.as_str()) {
                out.push((
                    "erasure.meta.erased_kind (the rule's kind)".into(),
                    json!(k),
                    kind.cloned().unwrap_or_default(),
                ));
            }
        }
        match erased.and_then(|id| self.erased.get(&id)) {
            Some((ts, _)) if ts.as_str() < cutoff.as_str() => {}
            Some((ts, _)) => out.push((
                "the erased event's ts (before the cutoff)".into(),
                json!(format!("before {cutoff}")),
                json!(ts),
            )),
            None => out.push((
                "erasure.meta.erased_id: an earlier event in the erased form".into(),
                json!("erased"),
                json!(erased),
            )),
        }
        out
    }
}

/// The retention erasure's content as the writer's constructor builds it
/// ([`crate::event::erasure::content`]), if `content` is not that.
fn content_differs(content: &str, erased: Option<i64>, kind: Option<&Value>) -> Option<Difference> {
    let (id, kind) = (erased?, kind?.as_str()?);
    let want = crate::event::erasure::content(id, &Kind::from(kind), retention::REASON);
    (content != want).then(|| ("erasure.content".into(), json!(want), json!(content)))
}
