//! What `pmm-verify --db URL` checks besides the server's rows, as findings: the head row
//! every append locks against the events (a role that may update it can move it), the newest
//! head this host verified against the server ([`super::witness`]), and this host's cache,
//! event by event, against the server (a cache changed on this host would be read by every
//! program here, and a catch-up reads only what is new).

use super::witness::{self, Divergence, Witness};
use crate::chain::{Finding, Problem};
use crate::event::Event;
use crate::store::log::EventLog;
use crate::store::notices;
use crate::store::postgres::PgLog;
use crate::Result;
use serde_json::{json, Value};

/// At most this many `cache_mismatch` findings are reported (the first ones).
const MAX_CACHE_FINDINGS: usize = 100;

/// The findings about the PostgreSQL ledger at `url` that its rows alone do not show (with
/// `host`, this host's record and cache of it too). What cannot be checked on this host (no
/// cache yet, a cache directory it cannot use) is skipped with a warning: the server's rows
/// are verified all the same.
pub fn audit(url: &str, host: bool) -> Result<Vec<Finding>> {
    let log = PgLog::open_reader(url)?;
    let mut found = Vec::new();
    let last = log.head()?;
    let (row_id, row_hash) = log.head_row()?;
    let last_id = last.as_ref().map_or(0, |h| h.id);
    let last_hash = last.as_ref().and_then(|h| h.hash.clone());
    if row_id != last_id || row_hash != last_hash {
        found.push(Finding::new(
            Some(last_id),
            Problem::HeadMismatch {
                expected: json!({"id": last_id, "hash": last_hash}),
                found: json!({"id": row_id, "hash": row_hash}),
            },
        ));
    }
    if !host {
        return Ok(found);
    }
    let file = super::cache_file(url)?;
    let witness = match Witness::load(&file) {
        Ok(w) => w,
        Err(e) => {
            notices::push(format!(
                "this host's record of the ledger was not checked: {e}"
            ));
            return Ok(found);
        }
    };
    if let Some(Some(d)) = witness
        .head()
        .map(|h| witness::judge(h, &log))
        .transpose()?
    {
        found.push(divergence_finding(d));
        return Ok(found);
    }
    if file.exists() {
        check_cache(url, &log, &mut found)?;
    }
    Ok(found)
}

/// The finding for a server that diverged from what this host verified.
pub fn divergence_finding(d: Divergence) -> Finding {
    match d {
        Divergence::Rewritten {
            id,
            verified,
            found,
        } => Finding::new(
            Some(id),
            Problem::HistoryRewritten {
                expected: verified,
                found,
            },
        ),
        Divergence::RolledBack {
            id,
            verified,
            server_head,
        } => Finding::new(
            Some(id),
            Problem::RolledBack {
                expected: verified,
                server_head,
            },
        ),
    }
}

/// Compares this host's cache, caught up first, with the server's rows, event by event.
fn check_cache(url: &str, log: &PgLog, found: &mut Vec<Finding>) -> Result<()> {
    let cache = match super::open(url, false, crate::store::DEFAULT_BUSY_TIMEOUT_MS) {
        Ok(c) => c,
        Err(e) => {
            if let Some(d) = refused(&e) {
                found.push(divergence_finding(d));
            } else {
                notices::push(format!("this host's cache was not checked: {e}"));
            }
            return Ok(());
        }
    };
    let mut mismatches = 0;
    log.stream_all(&mut |server| {
        let mine = cache.get(server.id)?;
        if mine.as_ref() != Some(&server) {
            found.push(Finding::new(
                Some(server.id),
                Problem::CacheMismatch {
                    expected: as_value(Some(&server)),
                    found: as_value(mine.as_ref()),
                },
            ));
            mismatches += 1;
        }
        Ok(mismatches < MAX_CACHE_FINDINGS)
    })
}

/// How a server diverged, when `e` is the refusal of one.
fn refused(e: &crate::Error) -> Option<Divergence> {
    let crate::Error::Exit(c) = e else {
        return None;
    };
    c.downcast_ref::<witness::Refused>()
        .map(|r| r.divergence.clone())
}

/// An event as exported, or null.
fn as_value(ev: Option<&Event>) -> Value {
    let Some(ev) = ev else {
        return Value::Null;
    };
    let mut line = Vec::new();
    ev.write_jsonl(&mut line);
    serde_json::from_slice(&line).unwrap_or(Value::Null)
}
