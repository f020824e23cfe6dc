//! `pmm-verify --deep` on a ledger file: every turn of the current prompt format has its prompt
//! rebuilt from the ledger ([`crate::context::prompt`]) and checked against the reply's
//! `prompt_sha256`. One fold over the ledger gives the state as of each turn (from the newest
//! projection checkpoint before the first one); the history and the recorded selection are
//! index look-ups. Replies of another format, or of none, are counted, not checked.

use crate::chain::Problem;
use crate::context::prompt::{self, RebuildError, Turn};
use crate::event::Kind;
use crate::store::{Filter, Reads};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// What the prompt check did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PromptCounts {
    /// Prompts rebuilt and compared.
    pub checked: u64,
    /// Replies of another (older) prompt format, or of none: not checked.
    pub other_format: u64,
    /// Prompts whose digest differs, or that could not be rebuilt.
    pub mismatches: u64,
}

/// Checks every current-format turn of `r`, handing each problem to `report` with the reply's
/// id.
pub fn check<R: Reads>(r: &R, report: &mut dyn FnMut(i64, Problem)) -> crate::Result<PromptCounts> {
    let mut counts = PromptCounts::default();
    let mut due: BTreeMap<i64, Vec<Turn>> = BTreeMap::new();
    let replies = Filter {
        kinds: vec![Kind::AssistantMessage.to_string()],
        ..Filter::default()
    };
    let mut turns = Vec::new();
    r.scan(&replies, |e| {
        match prompt::turn_of_reply(&e) {
            Ok(t) => turns.push(t),
            Err(_) => counts.other_format += 1,
        }
        Ok(true)
    })?;
    for t in turns {
        let head = prompt::head_of(r, t.user_id)?;
        due.entry(head).or_default().push(t);
    }
    let Some(&first) = due.keys().next() else {
        return Ok(counts);
    };
    let projected = crate::store::project(r, Some(first), true)?;
    let mut p = projected.projections;
    let mut settle = |p: &crate::projection::state::Projections, at: i64| -> crate::Result<()> {
        for t in due.remove(&at).unwrap_or_default() {
            counts.checked += 1;
            if let Some(problem) = compare(&t, prompt::rebuild_with(r, p, &t)?) {
                counts.mismatches += 1;
                report(t.reply, problem);
            }
        }
        Ok(())
    };
    settle(&p, first)?;
    let rest = Filter {
        since: Some(first + 1),
        ..Filter::default()
    };
    r.scan(&rest, |e| {
        p.apply(&e);
        settle(&p, e.id)?;
        Ok(true)
    })?;
    Ok(counts)
}

/// The finding for a turn whose rebuilt prompt is not the one recorded.
fn compare(t: &Turn, rebuilt: Result<prompt::Prompt, RebuildError>) -> Option<Problem> {
    let (what, expected) = match rebuilt {
        Ok(p) => {
            let sha = p.sha256();
            if sha == t.recorded {
                return None;
            }
            (
                "prompt_sha256 (the prompt rebuilt from the ledger)".to_string(),
                Value::String(sha),
            )
        }
        Err(e) => (format!("prompt_sha256: {e}"), Value::Null),
    };
    Some(Problem::DerivedMismatch {
        what,
        expected,
        found: Value::String(t.recorded.clone()),
    })
}
