//! The `verify` tool: `pmm-verify [--deep]` on the served ledger through the same engine
//! ([`crate::audit::verify`]), its first [`MAX_FINDINGS`] findings kept and all counted
//! instead of printed.

use super::tools::ToolError;
use super::MAX_FINDINGS;
use crate::audit::verify::{self, Options};
use crate::interchange::Input;
use serde_json::{json, Value};
use std::path::Path;

/// Verifies the ledger at `db` (with `deep`, every derived event too) and returns
/// `{"summary", "findings", "findings_total"}`.
pub fn verify(db: &Path, deep: bool) -> Result<Value, ToolError> {
    // A reader never creates a ledger: a missing one is an error, not an empty pass.
    crate::store::Ledger::open_reader(db)?;
    let input = Input::new(db);
    let mut findings: Vec<Value> = Vec::new();
    let mut total = 0u64;
    let opts = Options {
        deep,
        ..Options::default()
    };
    let summary = verify::verify(&input, opts, &|_| {}, &mut |f| {
        total += 1;
        if findings.len() < MAX_FINDINGS {
            findings.push(serde_json::to_value(&f).unwrap_or(Value::Null));
        }
        Ok(())
    })
    .map_err(|e| ToolError(format!("cannot verify {}: {e}", crate::store::shown(db))))?;
    Ok(json!({
        "summary": summary,
        "findings": findings,
        "findings_total": total,
    }))
}
