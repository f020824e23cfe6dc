//! The guards a writer and `pmm-verify --integrity` share: a head below ids already written
//! (a damaged page hides events, and appending would reuse their ids) and SQLite's own check.

use super::schema::{self, Schema};
use super::{Head, Ledger, Reads};
use crate::Result;
use rusqlite::{Connection, OptionalExtension};

/// Why appending after `head` would be unsafe, if it would: ids above it have been written
/// already (`sqlite_sequence`, which AUTOINCREMENT keeps at the highest id ever inserted, or
/// the id index, are ahead of the table), so a damaged page hides the events that hold them
/// and a new event would reuse their ids. One row lookup and one index probe per write.
pub(super) fn unsafe_head(
    conn: &Connection,
    schema: &Schema,
    head: Option<&Head>,
) -> rusqlite::Result<Option<String>> {
    let head_id = head.map_or(0, |h| h.id);
    let seq: Option<i64> = conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'events'",
            [],
            |r| r.get(0),
        )
        .optional()
        .or_else(|e| match e {
            // A ledger written without AUTOINCREMENT has no sqlite_sequence table.
            rusqlite::Error::SqliteFailure(_, Some(ref m)) if m.contains("no such table") => {
                Ok(None)
            }
            e => Err(e),
        })?;
    if let Some(seq) = seq.filter(|&s| s > head_id) {
        return Ok(Some(format!(
            "its last readable event is {head_id} but sqlite_sequence records id {seq} as written, so appending would reuse ids"
        )));
    }
    if schema.has_index("idx_events_id_desc") {
        let indexed: Option<i64> = conn
            .query_row(
                "SELECT id FROM events INDEXED BY idx_events_id_desc ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(max) = indexed.filter(|&m| m > head_id) {
            return Ok(Some(format!(
                "its last readable event is {head_id} but the id index holds id {max}, so appending would reuse ids"
            )));
        }
    }
    Ok(None)
}

/// What SQLite's own check of the file says: `PRAGMA quick_check` (page structure, record
/// formats, constraints), or with `full` `PRAGMA integrity_check` (also that every index
/// matches its table). Empty when it says `ok`; at most `limit` messages otherwise.
pub fn sqlite_check(ledger: &Ledger, full: bool, limit: u32) -> Result<Vec<String>> {
    let pragma = if full {
        "integrity_check"
    } else {
        "quick_check"
    };
    let conn = &ledger.conn;
    let mut stmt = conn
        .prepare(&format!("PRAGMA {pragma}({})", limit.max(1)))
        .map_err(|e| ledger.err(e))?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(|e| ledger.err(e))?;
    let mut out = Vec::new();
    for row in rows {
        let line = row.map_err(|e| ledger.err(e))?;
        if line != "ok" {
            // "*** in database main ***" heads the list; it says nothing on its own.
            out.extend(
                line.lines()
                    .filter(|l| !l.starts_with("*** "))
                    .map(str::to_string),
            );
        }
    }
    // The writers' own guard, which SQLite's check does not know about.
    let head = ledger.head()?;
    let schema = schema::of(conn).map_err(|e| ledger.err(e))?;
    if let Some(why) = unsafe_head(conn, &schema, head.as_ref()).map_err(|e| ledger.err(e))? {
        out.push(why);
    }
    Ok(out)
}
