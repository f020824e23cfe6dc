//! The `verify` tool: `pmm-verify [--deep]` on the served ledger, its findings collected
//! instead of printed.
//!
//! The walk is the one of `cmd::verify::verify_input` (the chain, the second pass for far
//! links, the deep checker, SQLite's quick_check), which prints as it goes; here the first
//! [`MAX_FINDINGS`] findings are kept and all are counted.

use super::tools::ToolError;
use super::MAX_FINDINGS;
use crate::audit::deep::{DeepChecker, SelfModel, KINDS_CHECKED, KINDS_NOT_CHECKED};
use crate::chain::{Finding, Problem, Verifier};
use crate::event::Event;
use crate::interchange::{self, Input, Item};
use crate::projection::state::Projections;
use serde_json::{json, Map, Value};
use std::path::Path;

/// The self-model `--deep` checks `summary_update` snapshots against (as `pmm-verify`).
#[derive(Default)]
struct ProjectionModel(Projections);

impl SelfModel for ProjectionModel {
    fn observe(&mut self, ev: &Event, _meta: Option<&Map<String, Value>>) {
        self.0.apply(ev);
    }
    fn expected_rsm_state(&mut self, summary: &Event, _content: Option<&Value>) -> Option<Value> {
        let ours = summary
            .meta_map()
            .is_ok_and(|m| m.contains_key("rsm_reflections_total"));
        Some(if ours {
            self.0.rsm.summary_snapshot(&self.0.concepts).0
        } else {
            self.0.rsm_snapshot()
        })
    }
}

/// Keeps the first findings, counts them all.
#[derive(Default)]
struct Kept {
    findings: Vec<Value>,
    total: u64,
}

impl Kept {
    fn take(&mut self, found: &mut Vec<Finding>) {
        for f in found.drain(..) {
            self.total += 1;
            if self.findings.len() < MAX_FINDINGS {
                self.findings
                    .push(serde_json::to_value(&f).unwrap_or(Value::Null));
            }
        }
    }
}

/// Verifies the ledger at `db` (with `deep`, every derived event too) and returns
/// `{"summary", "findings", "findings_total"}`.
pub fn verify(db: &Path, deep: bool) -> Result<Value, ToolError> {
    // A reader never creates a ledger: a missing one is an error, not an empty pass.
    crate::store::Ledger::open_reader(db)?;
    let input = Input::new(db);
    let mut v = Verifier::new(Vec::new());
    let mut found: Vec<Finding> = Vec::new();
    let mut kept = Kept::default();
    let mut checker =
        deep.then(|| DeepChecker::new().with_self_model(Box::new(ProjectionModel::default())));
    let mut derived: Vec<Finding> = Vec::new();
    interchange::read_with(
        &input,
        &|_| {},
        &interchange::digest,
        &mut |item, digest| {
            match (item, digest) {
                (Item::Event(r), d) => {
                    match d {
                        Some(d) => v.check_computed(&r.event, d, &mut found),
                        None => v.check(&r.event, r.meta.as_ref(), &mut found),
                    }
                    if let Some(c) = checker.as_mut() {
                        c.check(&r.event, &mut derived);
                        for f in derived.drain(..) {
                            v.report(f.id, f.problem, &mut found);
                        }
                    }
                }
                (Item::Malformed { line, id, error }, _) => {
                    v.malformed(id, line, error, &mut found)
                }
            }
            kept.take(&mut found);
            Ok(true)
        },
    )
    .map_err(|e| ToolError(format!("cannot verify {}: {e}", db.display())))?;
    let chain_pass = v.second_pass();
    let deep_pass = checker.as_mut().and_then(|c| c.second_pass());
    if chain_pass.is_some() || deep_pass.is_some() {
        let (mut chain_pass, mut deep_pass) = (chain_pass, deep_pass);
        interchange::read(&input, &|_| {}, &mut |item| {
            if let Item::Event(r) = item {
                if let Some(p) = chain_pass.as_mut() {
                    p.see(r.event.id, r.event.hash.as_deref());
                }
                if let Some(p) = deep_pass.as_mut() {
                    p.see(&r.event);
                }
            }
            Ok(true)
        })
        .map_err(|e| ToolError(format!("cannot verify {}: {e}", db.display())))?;
        if let Some(p) = chain_pass {
            v.settle(p, &mut found);
        }
        if let (Some(c), Some(p)) = (checker.as_mut(), deep_pass) {
            c.settle(p, &mut derived);
            for f in derived.drain(..) {
                v.report(f.id, f.problem, &mut found);
            }
        }
    }
    if v.events() == 0 {
        v.report(
            None,
            Problem::Empty {
                error: "no events: an empty ledger is not a verified one".into(),
            },
            &mut found,
        );
    }
    let ledger = crate::store::Ledger::open_reader(db)?;
    for error in crate::store::sqlite_check(&ledger, false, 100)? {
        let problem = Problem::SqliteDamage {
            check: "quick_check".into(),
            error,
        };
        v.report(None, problem, &mut found);
    }
    let deep_counts = checker.map(|c| c.finish());
    let mut summary = v.finish(&mut found);
    kept.take(&mut found);
    summary.deep = deep_counts
        .and_then(|c| serde_json::to_value(c).ok())
        .map(|mut d| {
            let list = |l: &[(&str, &str)]| {
                Value::Object(
                    l.iter()
                        .map(|(k, why)| (k.to_string(), Value::String(why.to_string())))
                        .collect(),
                )
            };
            d["kinds_checked"] = list(KINDS_CHECKED);
            d["kinds_not_checked"] = list(KINDS_NOT_CHECKED);
            d
        });
    summary.source = Some(input.name());
    Ok(json!({
        "summary": summary,
        "findings": kept.findings,
        "findings_total": kept.total,
    }))
}
