//! The full-text index: SQLite FTS5 over the events a person would want recalled (SPEC §4
//! pmm-recall). Derived data, never part of the chain, exports or verification.
//!
//! - `pmm_fts` is an FTS5 table whose *external content* is the view `pmm_recallable` (the
//!   recallable events' id and content): the index holds only tokens, the text stays once in
//!   `events`, and FTS5's own `integrity-check` can compare the index with the ledger.
//! - `pmm_fts_state.through` is the highest event id the index covers. Every write transaction
//!   brings the index up to its head just before it commits ([`catch_up`]), so a crash can
//!   never leave the index ahead of or behind the ledger; a ledger that another program (the
//!   Python reference) appended to is caught up by the next writer.
//! - Tokenizer `porter unicode61 remove_diacritics 2`: `unicode61` splits on Unicode
//!   letters and digits and folds case for every script, `remove_diacritics 2` makes "café"
//!   match "cafe", and the Porter stemmer makes "painting", "painted" and "paints" one term,
//!   which is how people ask about what they said in other inflections.

use crate::event::Kind;
use rusqlite::{params, Connection, OptionalExtension};

/// The kinds the index holds: what a person would want recalled.
pub const RECALLED_KINDS: [&str; 8] = [
    Kind::UserMessage.as_str(),
    Kind::AssistantMessage.as_str(),
    Kind::Reflection.as_str(),
    Kind::SummaryUpdate.as_str(),
    Kind::LifetimeMemory.as_str(),
    Kind::Claim.as_str(),
    Kind::CommitmentOpen.as_str(),
    Kind::CommitmentClose.as_str(),
];

/// The tokenizer of every full-text table.
pub const TOKENIZER: &str = "porter unicode61 remove_diacritics 2";

pub(crate) fn kinds_sql() -> String {
    RECALLED_KINDS
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The migration that creates the index (empty; [`catch_up`] fills it). Its kind list is
/// [`RECALLED_KINDS`] (a unit test keeps the two equal).
pub(crate) const MIGRATION: &str = "
CREATE VIEW IF NOT EXISTS pmm_recallable AS
    SELECT id, content AS body FROM events WHERE kind IN ('user_message','assistant_message',
    'reflection','summary_update','lifetime_memory','claim','commitment_open','commitment_close');
CREATE VIRTUAL TABLE IF NOT EXISTS pmm_fts USING fts5(
    body, content='pmm_recallable', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS pmm_fts_state (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    through INTEGER NOT NULL
);
INSERT OR IGNORE INTO pmm_fts_state (id, through) VALUES (0, 0);";

/// Whether the ledger has the whole index (a reference ledger, or one only readers opened, has
/// none; one with a table or its state row gone has a broken one, which readers do without
/// and the next writer restores: [`super::Derived`]).
pub(crate) fn has_index(conn: &Connection) -> rusqlite::Result<bool> {
    super::Derived::Text.whole(conn)
}

/// Whether a reader can search the index: it is whole, and so is the view that is its
/// content.
pub(crate) fn usable(conn: &Connection) -> rusqlite::Result<bool> {
    Ok(super::Derived::Views.whole(conn)? && has_index(conn)?)
}

/// The view `pmm_recallable`, the index's content, as the migration makes it.
fn view_sql() -> String {
    format!(
        "CREATE VIEW IF NOT EXISTS pmm_recallable AS SELECT id, content AS body FROM events WHERE kind IN ({})",
        kinds_sql()
    )
}

/// Makes the view again if it is missing (the index over it is left as it is).
pub(crate) fn restore_view(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&view_sql())
}

/// Makes the view again as the migration made it, whatever stands under its name.
pub(crate) fn rebuild_view(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("DROP VIEW IF EXISTS pmm_recallable;")?;
    restore_view(conn)
}

/// The highest event id the index covers (`None` without a whole index).
pub(crate) fn through(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    if !has_index(conn)? {
        return Ok(None);
    }
    conn.query_row("SELECT through FROM pmm_fts_state WHERE id = 0", [], |r| {
        r.get(0)
    })
    .optional()
}

/// Makes a broken index whole again, empty, inside the caller's write transaction: whatever
/// is left of it is dropped and it is made as the migration makes it (the catch-up then
/// fills it from the ledger). A whole index is left as it is.
pub(crate) fn restore(conn: &Connection) -> rusqlite::Result<()> {
    if has_index(conn)? {
        return Ok(());
    }
    // Dropping the FTS5 table drops its shadow tables; those left without it go one by one.
    conn.execute_batch(
        "DROP TABLE IF EXISTS pmm_fts;
         DROP TABLE IF EXISTS pmm_fts_data;
         DROP TABLE IF EXISTS pmm_fts_idx;
         DROP TABLE IF EXISTS pmm_fts_docsize;
         DROP TABLE IF EXISTS pmm_fts_config;
         DROP TABLE IF EXISTS pmm_fts_state;",
    )?;
    conn.execute_batch(MIGRATION)
}

/// Indexes the recallable events with `from < id <= to` and records `to` as covered. The
/// caller holds a write transaction.
pub(crate) fn index_range(conn: &Connection, from: i64, to: i64) -> rusqlite::Result<()> {
    if to > from {
        conn.prepare_cached(&format!(
            "INSERT INTO pmm_fts (rowid, body)
             SELECT id, content FROM events WHERE id > ?1 AND id <= ?2 AND kind IN ({})",
            kinds_sql()
        ))?
        .execute(params![from, to])?;
    }
    conn.prepare_cached("UPDATE pmm_fts_state SET through = ?1 WHERE id = 0")?
        .execute([to])?;
    Ok(())
}

/// Brings the index up to `head` inside the caller's write transaction, `step` events at a
/// time, reporting `(done, total)` after each step.
pub(crate) fn catch_up(
    conn: &Connection,
    head: i64,
    step: i64,
    progress: &mut dyn FnMut(u64, u64),
) -> rusqlite::Result<()> {
    let Some(from) = through(conn)? else {
        return Ok(());
    };
    if from == head {
        return Ok(());
    }
    if from > head {
        // The index claims events the ledger does not have: rebuild it.
        return rebuild(conn, head);
    }
    let total = head.saturating_sub(from) as u64;
    let mut at = from;
    while at < head {
        // `step` events, not ids: a ledger whose ids jump (another writer's) must not make
        // this walk the gap one empty range at a time.
        let to = conn
            .prepare_cached("SELECT id FROM events WHERE id > ?1 ORDER BY id LIMIT 1 OFFSET ?2")?
            .query_row(params![at, step.max(1) - 1], |r| r.get::<_, i64>(0))
            .optional()?
            .map_or(head, |id| id.min(head));
        index_range(conn, at, to)?;
        at = to;
        progress(at.saturating_sub(from) as u64, total);
    }
    Ok(())
}

/// Rebuilds the whole index from the ledger (`--reindex`).
pub(crate) fn rebuild(conn: &Connection, head: i64) -> rusqlite::Result<()> {
    conn.execute("INSERT INTO pmm_fts (pmm_fts) VALUES ('rebuild')", [])?;
    conn.execute(
        "INSERT OR REPLACE INTO pmm_fts_state (id, through) VALUES (0, ?1)",
        [head],
    )?;
    Ok(())
}

/// FTS5's own check of the index against the ledger's text (`pmm-recall --check`): `Ok(None)`
/// when they match, else what SQLite said.
pub(crate) fn integrity(conn: &Connection) -> rusqlite::Result<Option<String>> {
    match conn.execute(
        "INSERT INTO pmm_fts (pmm_fts, rank) VALUES ('integrity-check', 1)",
        [],
    ) {
        Ok(_) => Ok(None),
        Err(rusqlite::Error::SqliteFailure(f, msg))
            if f.code == rusqlite::ErrorCode::DatabaseCorrupt =>
        {
            Ok(Some(
                msg.unwrap_or_else(|| "the index does not match".into()),
            ))
        }
        Err(e) => Err(e),
    }
}

/// Builds a temporary index (in the connection's `temp` schema, never in the file) of the
/// recallable events after `after` through `head`, for a reader whose ledger has no index or
/// one that lags. One built for the same `after` and `head` is kept: a process that asks many
/// questions (`pmm-recall --lines`, the MCP server) builds it once, not once per look-up, until
/// the ledger grows (an erasure appends its record, so it grows too).
pub(crate) fn temp_index(conn: &Connection, after: i64, head: i64) -> rusqlite::Result<()> {
    let built: rusqlite::Result<(i64, i64)> =
        conn.query_row("SELECT after, head FROM temp.pmm_fts_tmp_state", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        });
    if built.is_ok_and(|b| b == (after, head)) {
        return Ok(());
    }
    conn.execute_batch(&format!(
        "DROP TABLE IF EXISTS temp.pmm_fts_tmp;
         DROP TABLE IF EXISTS temp.pmm_fts_tmp_state;
         CREATE VIRTUAL TABLE temp.pmm_fts_tmp USING fts5(body, content='', tokenize='{TOKENIZER}');"
    ))?;
    conn.execute(
        &format!(
            "INSERT INTO temp.pmm_fts_tmp (rowid, body)
             SELECT id, content FROM main.events WHERE id > ?1 AND id <= ?2 AND kind IN ({})",
            kinds_sql()
        ),
        [after, head],
    )?;
    conn.execute_batch("CREATE TABLE temp.pmm_fts_tmp_state (after INTEGER, head INTEGER)")?;
    conn.execute(
        "INSERT INTO temp.pmm_fts_tmp_state VALUES (?1, ?2)",
        [after, head],
    )?;
    Ok(())
}

/// Drops a reader's temporary index, if it built one: called when the ledger's own index
/// covers every event again (after a writer caught it up, as an erasure's write does), so the
/// text of events erased since does not stay in this process's memory.
pub(crate) fn drop_temp_index(conn: &Connection) -> rusqlite::Result<()> {
    let built: bool = conn
        .prepare_cached(
            "SELECT EXISTS(SELECT 1 FROM temp.sqlite_master WHERE name = 'pmm_fts_tmp_state')",
        )?
        .query_row([], |r| r.get(0))?;
    if built {
        conn.execute_batch(
            "DROP TABLE IF EXISTS temp.pmm_fts_tmp; DROP TABLE IF EXISTS temp.pmm_fts_tmp_state;",
        )?;
    }
    Ok(())
}

/// One term's postings, scored: `(event id, bm25 score)` for events before `before`, the
/// newest `limit` of them (bounded work for very common terms: a rare term has all its
/// postings scored; a term in more than `limit` events, whose weight is low anyway, only its
/// newest ones). Scores are positive, higher is better. `table` is `main.pmm_fts` or
/// `temp.pmm_fts_tmp`.
pub(crate) fn term_hits(
    conn: &Connection,
    table: &str,
    term: &str,
    before: i64,
    limit: usize,
) -> rusqlite::Result<Vec<(i64, f64)>> {
    let name = table.rsplit('.').next().unwrap_or(table);
    let sql = format!(
        "SELECT rowid, bm25({name}) FROM {table} WHERE {name} MATCH ?1 AND rowid < ?2
         ORDER BY rowid DESC LIMIT ?3"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let phrase = format!("\"{}\"", term.replace('"', "\"\""));
    let rows = stmt.query_map(params![phrase, before, limit as i64], |r| {
        Ok((r.get::<_, i64>(0)?, -r.get::<_, f64>(1)?))
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader's temporary index is built once for a ledger's state and again when the
    /// ledger grows.
    #[test]
    fn a_temporary_index_is_kept_until_the_ledger_grows() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE events (id INTEGER PRIMARY KEY, ts TEXT, kind TEXT, content TEXT);
             INSERT INTO events VALUES (1, 't', 'user_message', 'the kayak is yellow');",
        )
        .unwrap();
        let hits = |term| term_hits(&conn, "temp.pmm_fts_tmp", term, i64::MAX, 10).unwrap();
        temp_index(&conn, 0, 1).unwrap();
        assert_eq!(hits("kayak").len(), 1);
        conn.execute("UPDATE events SET content = 'a canoe' WHERE id = 1", [])
            .unwrap();
        temp_index(&conn, 0, 1).unwrap();
        assert_eq!(hits("kayak").len(), 1, "kept: the same state");
        conn.execute(
            "INSERT INTO events VALUES (2, 't', 'user_message', 'a red kayak')",
            [],
        )
        .unwrap();
        temp_index(&conn, 0, 2).unwrap();
        let ids: Vec<i64> = hits("kayak").into_iter().map(|h| h.0).collect();
        assert_eq!(ids, [2], "rebuilt for the grown ledger");
        assert_eq!(hits("canoe").len(), 1);
    }

    #[test]
    fn the_migration_indexes_exactly_the_recalled_kinds() {
        assert!(MIGRATION.contains(&format!("'{TOKENIZER}'")));
        let flat: String = MIGRATION.split_whitespace().collect();
        assert!(flat.contains(&format!("kindIN({})", kinds_sql())), "{flat}");
        let view: String = view_sql().split_whitespace().collect();
        assert!(
            flat.contains(&view),
            "the view made again is the migration's: {view}"
        );
    }
}
