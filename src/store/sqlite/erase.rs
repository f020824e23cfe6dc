//! Erasure (`pmm-append --erase`): an event's content and meta removed from the `events` row
//! and from every derived table that could hold its text (the full-text index, vectors and
//! their packs, projection checkpoints), in the transaction that appends the `erasure` event
//! naming it. The row keeps its id, ts, kind, prev_hash and hash, so the chain still links
//! through it and its Merkle leaf is unchanged; only its own hash can no longer be recomputed.
//!
//! The connection runs with `PRAGMA secure_delete` (freed bytes are zeroed, not just
//! unlinked), the full-text index is rewritten without the deleted tokens
//! ([`compact_index`]), and the caller checkpoints the WAL with `TRUNCATE` after the commit,
//! so the text is gone from the file's bytes.

use super::{fts, vectors};
use crate::event::Kind;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Environment variable (a testing aid): milliseconds to wait inside an erasure's
/// transaction, after every event is erased and before the commit, so that a test can kill
/// the process in the middle of a large erasure.
pub const PAUSE_ENV: &str = "PMM_TEST_ERASE_PAUSE_MS";

/// Characters of an erased text (stripped) that another event must contain to quote it.
pub const QUOTE_CHARS: usize = 60;

/// Texts shorter than this (stripped) are not looked for in other events: too short to tell
/// a quote from a coincidence.
pub const MIN_QUOTE_CHARS: usize = 16;

/// The id an erasure event's `meta` text names (`erased_id`).
pub fn erased_id(meta: &str) -> Option<i64> {
    serde_json::from_str::<serde_json::Value>(meta)
        .ok()?
        .get("erased_id")?
        .as_i64()
}

/// The `erasure` event that already names event `id`, if there is one (erasure events carry
/// `"erased_id":ID,` in their canonical meta).
pub(crate) fn erased_by(conn: &Connection, id: i64) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached(
        "SELECT id FROM events WHERE kind = ?1 AND instr(meta, ?2) > 0 ORDER BY id LIMIT 1",
    )?
    .query_row(
        params![Kind::Erasure.as_str(), format!("\"erased_id\":{id},")],
        |r| r.get(0),
    )
    .optional()
}

/// What another event must contain to quote `content`: its first [`QUOTE_CHARS`] characters
/// (stripped), as written and as canonical JSON writes them inside a string (a summary's or a
/// meta's text); `None` when the text is too short to look for.
pub fn quote_needles(content: &str) -> Option<(String, String)> {
    let stripped = crate::pystr::strip(content);
    if stripped.chars().count() < MIN_QUOTE_CHARS {
        return None;
    }
    let needle: String = stripped.chars().take(QUOTE_CHARS).collect();
    let json = crate::canon::built(&Value::String(needle.clone()));
    let json = json[1..json.len() - 1].to_string();
    Some((needle, json))
}

/// The kinds that quote what was said: what the runtime derives from messages (a message
/// that repeats another is not a quote of it, and on a ledger of repeated texts would make
/// every repetition one).
pub const QUOTING_KINDS: [Kind; 8] = [
    Kind::Reflection,
    Kind::SummaryUpdate,
    Kind::LifetimeMemory,
    Kind::MetaSummary,
    Kind::Claim,
    Kind::CommitmentOpen,
    Kind::CommitmentClose,
    Kind::IdentityAdoption,
];

/// The events after `id` that carry event `id`'s text or what identifies it: those of the
/// [`QUOTING_KINDS`] whose content or meta quote `content`, and the `embedding_add` events of
/// event `id` (a hash64 vector of its words and the sha256 of its text, with which anyone who
/// guesses the text can confirm it). In id order.
pub(crate) fn quoting(conn: &Connection, id: i64, content: &str) -> rusqlite::Result<Vec<i64>> {
    let mut ids = embeddings_of(conn, id)?;
    if let Some((raw, json)) = quote_needles(content) {
        let kinds: Vec<String> = QUOTING_KINDS
            .iter()
            .map(|k| format!("'{}'", k.as_str()))
            .collect();
        let mut stmt = conn.prepare(&format!(
            "SELECT id FROM events WHERE id > ?1 AND +kind IN ({})
             AND (instr(content, ?2) > 0 OR instr(content, ?3) > 0 OR instr(meta, ?3) > 0)
             ORDER BY id",
            kinds.join(",")
        ))?;
        let rows = stmt.query_map(params![id, raw, json], |r| r.get(0))?;
        for row in rows {
            ids.push(row?);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// [`quoting`] for many events in one pass: the events after the first target of the
/// [`QUOTING_KINDS`] are searched for every target's needles at once (Aho-Corasick), and the
/// `embedding_add` events after it are matched by their `event_id`. A quote counts only for
/// the targets before it. Quoted id → quoting ids, in id order.
pub(crate) fn quoting_many(
    conn: &Connection,
    targets: &[(i64, String)],
) -> rusqlite::Result<std::collections::BTreeMap<i64, Vec<i64>>> {
    use std::collections::BTreeMap;
    let mut found: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    let Some(first) = targets.iter().map(|t| t.0).min() else {
        return Ok(found);
    };
    let ids: std::collections::BTreeSet<i64> = targets.iter().map(|t| t.0).collect();
    // Pattern i belongs to target owner[i]: each text as written and as JSON writes it.
    let mut patterns = Vec::new();
    let mut owner = Vec::new();
    for (id, content) in targets {
        if let Some((raw, json)) = quote_needles(content) {
            patterns.push(raw);
            owner.push(*id);
            patterns.push(json);
            owner.push(*id);
        }
    }
    let matcher = aho_corasick::AhoCorasick::new(&patterns)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    let mut kinds: Vec<String> = QUOTING_KINDS
        .iter()
        .map(|k| format!("'{}'", k.as_str()))
        .collect();
    kinds.push(format!("'{}'", Kind::EmbeddingAdd.as_str()));
    let mut stmt = conn.prepare(&format!(
        "SELECT id, kind, content, meta FROM events WHERE id > ?1 AND +kind IN ({}) ORDER BY id",
        kinds.join(",")
    ))?;
    let mut rows = stmt.query([first])?;
    while let Some(row) = rows.next()? {
        let (id, kind, content, meta): (i64, String, String, String) =
            (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
        let mut quoted = std::collections::BTreeSet::new();
        if kind == Kind::EmbeddingAdd.as_str() {
            let of = serde_json::from_str::<Value>(&content)
                .ok()
                .and_then(|v| v.get("event_id")?.as_i64());
            quoted.extend(of.filter(|t| ids.contains(t)));
        } else if !patterns.is_empty() {
            for text in [&content, &meta] {
                for m in matcher.find_overlapping_iter(text.as_str()) {
                    quoted.insert(owner[m.pattern().as_usize()]);
                }
            }
        }
        for t in quoted.into_iter().filter(|&t| t < id) {
            found.entry(t).or_default().push(id);
        }
    }
    Ok(found)
}

/// What one retention rule selects ([`crate::event::config::RetentionRule`]): the events
/// before `before`, of `kind` and written by `source` (each when given), whose time is before
/// `cutoff`, that still have text (an erased event is blank), never an `erasure` or a
/// `config`; in id order, at most `limit`.
pub(crate) fn retention_candidates(
    conn: &Connection,
    before: i64,
    kind: Option<&str>,
    source: Option<&str>,
    cutoff: &str,
    limit: usize,
) -> rusqlite::Result<Vec<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM events WHERE id < ?1 AND ts < ?2 AND kind NOT IN ('erasure', 'config')
         AND (?3 IS NULL OR kind = ?3)
         AND (?4 IS NULL OR (json_valid(meta) AND json_extract(meta, '$.source') = ?4))
         AND NOT (content = '' AND meta = '{}') AND hash IS NOT NULL AND hash != ''
         ORDER BY id LIMIT ?5",
    )?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![before, cutoff, kind, source, limit], |r| r.get(0))?;
    rows.collect()
}

/// The `embedding_add` events after `id` whose `event_id` is `id`.
fn embeddings_of(conn: &Connection, id: i64) -> rusqlite::Result<Vec<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM events WHERE id > ?1 AND kind = ?2 AND instr(content, ?3) > 0
         AND json_valid(content) AND json_extract(content, '$.event_id') = ?1 ORDER BY id",
    )?;
    let rows = stmt.query_map(
        params![
            id,
            Kind::EmbeddingAdd.as_str(),
            format!("\"event_id\":{id}")
        ],
        |r| r.get(0),
    )?;
    rows.collect()
}

/// Removes event `id`'s text (`content`, of kind `kind`) from the derived tables, then blanks
/// the row's content and meta. The caller holds the write transaction.
pub(crate) fn scrub(
    conn: &Connection,
    id: i64,
    kind: &Kind,
    content: &str,
) -> rusqlite::Result<()> {
    let indexed = fts::through(conn)?.is_some_and(|t| t >= id)
        && fts::RECALLED_KINDS.contains(&kind.as_str());
    if indexed {
        // External content: FTS5 is told the old text so it can find the tokens to drop.
        conn.execute(
            "INSERT INTO pmm_fts (pmm_fts, rowid, body) VALUES ('delete', ?1, ?2)",
            params![id, content],
        )?;
    }
    if vectors::has_tables(conn)? {
        vectors::forget(conn, id)?;
    }
    if super::Derived::Checkpoints.whole(conn)? {
        // A projection state folded at or after the event may hold its text.
        conn.execute("DELETE FROM pmm_checkpoints WHERE event_id >= ?1", [id])?;
    }
    conn.execute(
        "UPDATE events SET content = '', meta = '{}' WHERE id = ?1",
        [id],
    )?;
    if indexed {
        // The row stays in the index, empty, as its content now is.
        conn.execute("INSERT INTO pmm_fts (rowid, body) VALUES (?1, '')", [id])?;
    }
    Ok(())
}

/// Rewrites the full-text index as one segment, without the tokens of deleted rows (a
/// delete only records that they are gone until segments merge; with `secure_delete` the
/// old pages are zeroed). FTS5's `secure-delete` option would do it per delete, but in
/// SQLite 3.46 it leaves an index of several segments malformed after a delete, and makes
/// the index unreadable to SQLite before 3.44. Costs a rewrite of the index: an erasure is
/// rare.
pub(crate) fn compact_index(conn: &Connection) -> rusqlite::Result<()> {
    if fts::through(conn)?.is_some() {
        conn.execute("INSERT INTO pmm_fts (pmm_fts) VALUES ('optimize')", [])?;
    }
    Ok(())
}

/// Checkpoints the WAL into the file and truncates it to nothing (the erased text may sit in
/// frames written before the erasure). `false` when a reader kept part of it from being
/// copied (it is copied and truncated by the next checkpoint).
pub(crate) fn truncate_wal(conn: &Connection) -> rusqlite::Result<bool> {
    let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
    Ok(busy == 0)
}

/// The file beside a cache that says its WAL may still hold an erased text: made before the
/// commit of a catch-up that erased one, removed once the WAL is truncated. A program killed
/// in between leaves it, and the next program that opens the cache truncates the WAL
/// ([`finish_erasure`]).
fn erasure_mark(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-erased");
    PathBuf::from(p)
}

pub(crate) fn mark_erasure(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(erasure_mark(path));
}

/// Truncates the WAL of the cache at `path` when a program was killed before it could after
/// a catch-up erased a text.
pub(crate) fn finish_erasure(path: &Path) {
    if erasure_mark(path).exists() {
        truncate_cache_wal(path);
    }
}

/// Checkpoints a cache's WAL into its file and truncates it, after a catch-up erased a text
/// (its frames may hold the text as it was), through a connection of its own (the batch's is
/// gone with its commit). A reader that keeps part of it leaves it to the next checkpoint.
pub(crate) fn truncate_cache_wal(path: &Path) {
    let done = Connection::open(path).and_then(|conn| truncate_wal(&conn));
    if matches!(done, Ok(true)) {
        let _ = std::fs::remove_file(erasure_mark(path));
    } else {
        crate::store::notices::push(format!(
            "{}: an erased text may stay in this cache's WAL until its next checkpoint ({})",
            path.display(),
            done.map_or_else(|e| e.to_string(), |_| "a reader kept part of it".into())
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(
            "CREATE TABLE events (id INTEGER PRIMARY KEY, ts TEXT, kind TEXT, content TEXT, meta TEXT, prev_hash TEXT, hash TEXT);",
        )
        .unwrap();
        c.execute_batch(fts::MIGRATION).unwrap();
        for (i, t) in [
            "my secret is correct horse battery staple",
            "ok",
            "next one",
        ]
        .iter()
        .enumerate()
        {
            c.execute(
                "INSERT INTO events VALUES (?1, '', 'user_message', ?2, '{}', NULL, ?3)",
                params![i as i64 + 1, t, format!("h{i}")],
            )
            .unwrap();
            // One segment per write, as a ledger's index grows.
            fts::catch_up(&c, i as i64 + 1, 100, &mut |_, _| {}).unwrap();
        }
        c
    }

    #[test]
    fn scrubbed_text_leaves_the_index_consistent() {
        let c = ledger();
        let content: String = c
            .query_row("SELECT content FROM events WHERE id = 1", [], |r| r.get(0))
            .unwrap();
        scrub(&c, 1, &Kind::UserMessage, &content).unwrap();
        assert_eq!(fts::integrity(&c).unwrap(), None);
        scrub(&c, 3, &Kind::UserMessage, "next one").unwrap();
        compact_index(&c).unwrap();
        assert_eq!(fts::integrity(&c).unwrap(), None);
        let left: i64 = c
            .query_row(
                "SELECT count(*) FROM pmm_fts_data WHERE instr(block, 'stapl') > 0",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0, "the token is gone from the index's pages");
        let hits: i64 = c
            .query_row(
                "SELECT count(*) FROM pmm_fts WHERE pmm_fts MATCH 'horse'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(hits, 0);
    }
}
