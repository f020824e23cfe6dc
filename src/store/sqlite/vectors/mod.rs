//! Sentence-embedding vectors of recallable events, kept per model (docs/recall.md). Derived
//! data, never part of the chain, exports or verification; made outside the write
//! transactions that append events (a model never blocks a writer) and filled in by turns,
//! ticks and `pmm-recall --embed`.
//!
//! - `pmm_embed_models` names each vector space (the embedder's id) with its dimension; a
//!   vector is only ever compared with vectors of its own model, so changing the model can
//!   never mix two spaces, and switching back finds the old vectors.
//! - `pmm_vectors` holds one vector per (model, event) as little-endian IEEE half floats, 2d
//!   bytes instead of 4d (a cosine differs from the `f32` one by about 10^-4; `i8` codes, at
//!   half that size, reorder near-ties often enough that their top 50 match exact search's only
//!   99 % of the time, which is the target with no margin).
//! - `pmm_vector_pack` holds, per model, chunks of [`CHUNK`] event ids with two bits per
//!   dimension each (``vector::codes`: a sign bit and a magnitude bit), so a search reads
//!   8 + d/4 bytes per vector in a few hundred rows. The packs are a function of the stored
//!   vectors alone (`repack` rebuilds them).
//!
//! A search is exhaustive and deterministic (the same vectors give the same ranking whatever
//! order they were added in; ties go by event id), with no approximate index, in three steps:
//! every vector of the model scored by its sign bits against the query at 4 bits per value,
//! in integers with `POPCNT` (the packs read one row at a time, keeping only what can still be
//! among the best [`PREFILTER`](crate::vector::PREFILTER)); those re-scored by both their bits against the query's own
//! values (an estimate of the cosine far closer than the signs'); and the best
//! [`candidates`] of those scored exactly with their stored vectors, read by id in id order.
//! With a second core each step is split over two connections.
//!
//! The magnitude bits are what keep the exact step small: on 10^6 vectors clustered as
//! sentence embeddings are (many near-paraphrases of one another, whose cosines with a
//! question differ in the third decimal), the signs alone order the members of a cluster
//! poorly, and 10,000 exact scores were needed to keep 99.5 % of exact search's top 50
//! (`scripts/vector-bench`); with both bits 2,500 keep as many. Each exact score is a read by
//! id, so a smaller ledger scores fewer: one vector in [`EXACT_SHARE`](crate::vector::EXACT_SHARE), from
//! [`MIN_CANDIDATES`](crate::vector::MIN_CANDIDATES) to [`CANDIDATES`](crate::vector::CANDIDATES).

mod cache;

/// The limits every search of the ledger uses.
pub(crate) use crate::vector::LIMITS;
use crate::vector::{
    best_exact, candidates, dot_quantized, magnitude_bits, merged, nearest_in_memory, sign_bits,
    Limits, Nearest, PackCodes, QueryCode, CHUNK,
};
/// A stored vector's bytes are these half floats (the store's `pmm_vectors.q`).
pub use crate::vector::{dequantize, quantize};
pub use cache::{PackCache, CACHED_BYTES};
use rusqlite::{params, Connection, OptionalExtension};
use std::sync::Mutex;

/// The migration that creates the tables (empty).
pub(crate) const MIGRATION: &str = "
CREATE TABLE IF NOT EXISTS pmm_embed_models (
    mid INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    dim INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS pmm_vectors (
    mid INTEGER NOT NULL,
    id INTEGER NOT NULL,
    q BLOB NOT NULL,
    PRIMARY KEY (mid, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pmm_vector_pack (
    mid INTEGER NOT NULL,
    chunk INTEGER NOT NULL,
    n INTEGER NOT NULL,
    ids BLOB NOT NULL,
    bits BLOB NOT NULL,
    PRIMARY KEY (mid, chunk)
) WITHOUT ROWID;";

/// The migration that keys the vectors by one integer, `mid << 40 | id` ([`key`]), in a rowid
/// table: a look-up by id then descends a tree of integers (three levels at 10^6 vectors)
/// instead of one whose every interior cell is a copy of a whole 780-byte row (five to a
/// page, eight levels), and costs a page read instead of several. `mid` and `id` remain as
/// virtual columns (no storage) for reading.
pub(crate) const MIGRATION_KEYED: &str = "
CREATE TABLE pmm_vectors_keyed (
    key INTEGER PRIMARY KEY,
    q BLOB NOT NULL,
    mid INTEGER AS (key >> 40) VIRTUAL,
    id INTEGER AS (key & 1099511627775) VIRTUAL
);
INSERT INTO pmm_vectors_keyed (key, q) SELECT (mid << 40) | id, q FROM pmm_vectors ORDER BY mid, id;
DROP TABLE pmm_vectors;
ALTER TABLE pmm_vectors_keyed RENAME TO pmm_vectors;";

/// Event ids below this are stored (`2^40`, about 1.1·10^12).
pub const MAX_ID: i64 = 1 << 40;

/// The key of model `mid`'s vector of event `id`.
fn key(mid: i64, id: i64) -> i64 {
    (mid << 40) | id
}

/// The migration that gives the packs their magnitude bits (empty until [`repack`], which the
/// migration runs, fills them).
pub(crate) const MIGRATION_MAGNITUDES: &str =
    "ALTER TABLE pmm_vector_pack ADD COLUMN mags BLOB NOT NULL DEFAULT x'';";

/// A model's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Model {
    /// Its key in the tables.
    pub mid: i64,
    /// Dimensions of its vectors.
    pub dim: usize,
}

/// Whether the ledger has the tables, all three (a reference ledger, or one only readers
/// opened, has none; one with a table dropped is searched without vectors until a writer
/// restores it: [`super::Derived`]).
pub(crate) fn has_tables(conn: &Connection) -> rusqlite::Result<bool> {
    super::Derived::Vectors.whole(conn)
}

/// The tables as the migrations leave them, for [`restore`].
const TABLES: &str = "
CREATE TABLE IF NOT EXISTS pmm_embed_models (
    mid INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    dim INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS pmm_vectors (
    key INTEGER PRIMARY KEY,
    q BLOB NOT NULL,
    mid INTEGER AS (key >> 40) VIRTUAL,
    id INTEGER AS (key & 1099511627775) VIRTUAL
);
CREATE TABLE IF NOT EXISTS pmm_vector_pack (
    mid INTEGER NOT NULL,
    chunk INTEGER NOT NULL,
    n INTEGER NOT NULL,
    ids BLOB NOT NULL,
    bits BLOB NOT NULL,
    mags BLOB NOT NULL DEFAULT x'',
    PRIMARY KEY (mid, chunk)
) WITHOUT ROWID;";

/// Makes the missing vector tables again, inside the caller's write transaction, keeping the
/// ones still there: vectors cost a model call each, so a lost table is made again empty and
/// `pmm-recall --embed` refills it. Stored vectors whose model's row was lost keep a model of
/// their own (`unnamed-MID`, never the number of a model registered later); packs are rebuilt
/// from the stored vectors when either was lost.
pub(crate) fn restore(conn: &Connection) -> rusqlite::Result<()> {
    let schema = super::schema::of(conn)?;
    if super::Derived::Vectors.have_in(conn, &schema)? == super::Have::Whole {
        return Ok(());
    }
    let whole_stores = schema.has("pmm_vectors") && schema.has("pmm_vector_pack");
    conn.execute_batch(TABLES)?;
    conn.execute(
        "INSERT OR IGNORE INTO pmm_embed_models (mid, name, dim)
         SELECT key >> 40, 'unnamed-' || (key >> 40), max(length(q)) / 2 FROM pmm_vectors
         WHERE (key >> 40) NOT IN (SELECT mid FROM pmm_embed_models) GROUP BY key >> 40",
        [],
    )?;
    conn.execute(
        "DELETE FROM pmm_vector_pack WHERE mid NOT IN (SELECT mid FROM pmm_embed_models)",
        [],
    )?;
    if !whole_stores {
        repack(conn)?;
    }
    Ok(())
}

/// Per model: `(name, vectors in its packs, vectors stored)`, by name (`pmm-recall --check`).
pub(crate) fn pack_counts(conn: &Connection) -> rusqlite::Result<Vec<(String, u64, u64)>> {
    if !has_tables(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(
        "SELECT name,
           (SELECT coalesce(sum(n), 0) FROM pmm_vector_pack p WHERE p.mid = m.mid),
           (SELECT count(*) FROM pmm_vectors v WHERE v.key >= (m.mid << 40) AND v.key < ((m.mid + 1) << 40))
         FROM pmm_embed_models m ORDER BY name",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get::<_, i64>(1)?.max(0) as u64,
            r.get::<_, i64>(2)?.max(0) as u64,
        ))
    })?;
    rows.collect()
}

/// The model called `name`, if it has been registered.
pub(crate) fn model(conn: &Connection, name: &str) -> rusqlite::Result<Option<Model>> {
    if !has_tables(conn)? {
        return Ok(None);
    }
    conn.query_row(
        "SELECT mid, dim FROM pmm_embed_models WHERE name = ?1",
        [name],
        |r| {
            Ok(Model {
                mid: r.get(0)?,
                dim: r.get::<_, i64>(1)? as usize,
            })
        },
    )
    .optional()
}

/// Registers `name` with `dim` dimensions (inside the caller's write transaction) and returns
/// its row; an existing model keeps its row (the caller compares the dimensions).
pub(crate) fn register(conn: &Connection, name: &str, dim: usize) -> rusqlite::Result<Model> {
    conn.execute(
        "INSERT OR IGNORE INTO pmm_embed_models (name, dim) VALUES (?1, ?2)",
        params![name, dim as i64],
    )?;
    Ok(model(conn, name)?.expect("registered just now"))
}

/// Every model with its vector count: `(name, dim, count)`, by name.
pub(crate) fn models(conn: &Connection) -> rusqlite::Result<Vec<(String, usize, u64)>> {
    if !has_tables(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(
        "SELECT name, dim, (SELECT coalesce(sum(n), 0) FROM pmm_vector_pack p WHERE p.mid = m.mid)
         FROM pmm_embed_models m ORDER BY name",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get::<_, i64>(1)? as usize,
            r.get::<_, i64>(2)? as u64,
        ))
    })?;
    rows.collect()
}

/// Stores vectors of model `m` (inside the caller's write transaction); events that already
/// have one keep it. Returns how many were new.
pub(crate) fn put(
    conn: &Connection,
    m: Model,
    vectors: &[(i64, Vec<f32>)],
) -> rusqlite::Result<usize> {
    let mut fresh: Vec<(i64, Vec<f32>)> = Vec::new();
    {
        let mut ins =
            conn.prepare_cached("INSERT OR IGNORE INTO pmm_vectors (key, q) VALUES (?1, ?2)")?;
        for (id, v) in vectors {
            let q = quantize(v);
            let fits = v.len() == m.dim && (0..MAX_ID).contains(id);
            if fits && ins.execute(params![key(m.mid, *id), q])? == 1 {
                fresh.push((*id, dequantize(&q)));
            }
        }
    }
    pack(conn, m, &fresh)?;
    Ok(fresh.len())
}

/// Model `m`'s stored vectors (their bytes as kept, [`quantize`]) of events `ids`, those
/// it has, for a copy elsewhere.
pub(crate) fn stored_of(
    conn: &Connection,
    m: Model,
    ids: &[i64],
) -> rusqlite::Result<Vec<(i64, Vec<u8>)>> {
    let mut get = conn.prepare_cached("SELECT q FROM pmm_vectors WHERE key = ?1")?;
    let mut out = Vec::with_capacity(ids.len());
    for &id in ids.iter().filter(|id| (0..MAX_ID).contains(*id)) {
        if let Some(q) = get
            .query_row([key(m.mid, id)], |r| r.get::<_, Vec<u8>>(0))
            .optional()?
        {
            out.push((id, q));
        }
    }
    Ok(out)
}

/// One row of `pmm_vector_pack`: up to [`CHUNK`] event ids and their codes.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PackRow {
    chunk: i64,
    n: usize,
    ids: Vec<u8>,
    bits: Vec<u8>,
    mags: Vec<u8>,
}

impl PackCodes for PackRow {
    fn len(&self) -> usize {
        self.n
    }

    fn codes(&self) -> (&[u8], &[u8], &[u8]) {
        (&self.ids, &self.bits, &self.mags)
    }
}

impl PackRow {
    const COLUMNS: &'static str = "chunk, n, ids, bits, mags";

    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<PackRow> {
        Ok(PackRow {
            chunk: r.get(0)?,
            n: r.get::<_, i64>(1)?.max(0) as usize,
            ids: r.get(2)?,
            bits: r.get(3)?,
            mags: r.get(4)?,
        })
    }

    fn write(&self, conn: &Connection, mid: i64) -> rusqlite::Result<()> {
        conn.prepare_cached(
            "INSERT OR REPLACE INTO pmm_vector_pack (mid, chunk, n, ids, bits, mags)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            mid,
            self.chunk,
            self.n as i64,
            self.ids,
            self.bits,
            self.mags
        ])?;
        Ok(())
    }
}

/// Appends the codes of `(id, vector)` pairs (their stored values) to the model's last pack
/// chunk, opening new ones as they fill. The packs are a function of `pmm_vectors` alone.
fn pack(conn: &Connection, m: Model, fresh: &[(i64, Vec<f32>)]) -> rusqlite::Result<()> {
    let mut rest = fresh;
    while !rest.is_empty() {
        let last = conn
            .query_row(
                &format!(
                    "SELECT {} FROM pmm_vector_pack WHERE mid = ?1 ORDER BY chunk DESC LIMIT 1",
                    PackRow::COLUMNS
                ),
                [m.mid],
                PackRow::read,
            )
            .optional()?;
        let mut row = match last {
            Some(row) if row.n < CHUNK => row,
            Some(full) => PackRow {
                chunk: full.chunk + 1,
                ..PackRow::default()
            },
            None => PackRow::default(),
        };
        let take = (CHUNK - row.n).min(rest.len());
        for (id, v) in &rest[..take] {
            row.ids.extend_from_slice(&id.to_le_bytes());
            row.bits.extend_from_slice(&sign_bits(v));
            row.mags.extend_from_slice(&magnitude_bits(v));
        }
        row.n += take;
        row.write(conn, m.mid)?;
        rest = &rest[take..];
    }
    Ok(())
}

/// Rebuilds every model's packs from its stored vectors, in id order (migration 6, which
/// gave the packs their magnitude bits: a few seconds at 10^6 vectors, once).
pub(crate) fn repack(conn: &Connection) -> rusqlite::Result<()> {
    let mids: Vec<i64> = conn
        .prepare("SELECT mid, dim FROM pmm_embed_models ORDER BY mid")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for mid in mids {
        let m = Model { mid, dim: 0 };
        conn.execute("DELETE FROM pmm_vector_pack WHERE mid = ?1", [mid])?;
        // The key before the model's first (`key(mid, -1)` is -1 whatever the model: a second
        // model's packs took in the first's vectors).
        let mut after = key(mid, 0) - 1;
        loop {
            let batch: Vec<(i64, Vec<f32>)> = conn
                .prepare_cached(
                    "SELECT key - (?1 << 40), q FROM pmm_vectors
                     WHERE key > ?2 AND key < ((?1 + 1) << 40) ORDER BY key LIMIT ?3",
                )?
                .query_map(params![mid, after, CHUNK as i64], |r| {
                    Ok((r.get(0)?, dequantize(r.get_ref(1)?.as_blob()?)))
                })?
                .collect::<rusqlite::Result<_>>()?;
            let Some(last) = batch.last().map(|b| b.0) else {
                break;
            };
            pack(conn, m, &batch)?;
            after = key(mid, last);
        }
    }
    Ok(())
}

/// Forgets event `id`'s vectors, of every model: its rows and its entries in the packs
/// (`pmm-append --erase`). The packs are read whole, which an erasure can afford.
pub(crate) fn forget(conn: &Connection, id: i64) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM pmm_vectors WHERE key IN (SELECT (mid << 40) | ?1 FROM pmm_embed_models)",
        [id],
    )?;
    let key = id.to_le_bytes();
    let mut hits = Vec::new();
    {
        let mut stmt = conn.prepare(&format!(
            "SELECT {}, mid FROM pmm_vector_pack",
            PackRow::COLUMNS
        ))?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let ids = r.get_ref(2)?.as_blob()?;
            if let Some(at) = ids.chunks_exact(8).position(|c| c == key) {
                hits.push((r.get::<_, i64>(5)?, at, PackRow::read(r)?));
            }
        }
    }
    for (mid, at, mut row) in hits {
        let width = row.bits.len() / row.n.max(1);
        row.ids.drain(at * 8..at * 8 + 8);
        row.bits.drain(at * width..(at + 1) * width);
        row.mags.drain(at * width..(at + 1) * width);
        row.n -= 1;
        row.write(conn, mid)?;
    }
    Ok(())
}

/// The recallable events after `after` that have no vector of model `m`: `(id, content)` in
/// id order, at most `limit`.
pub(crate) fn missing(
    conn: &Connection,
    m: Model,
    after: i64,
    limit: usize,
) -> rusqlite::Result<Vec<(i64, String)>> {
    if !has_tables(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT e.id, e.content FROM events e
         WHERE e.id > ?1 AND e.kind IN ({}) AND e.content <> ''
           AND NOT EXISTS (SELECT 1 FROM pmm_vectors v WHERE v.key = (?2 << 40) | e.id)
         ORDER BY e.id LIMIT ?3",
        super::fts::kinds_sql()
    ))?;
    let rows = stmt.query_map(params![after, m.mid, limit as i64], |r| {
        Ok((r.get(0)?, super::text(r.get_ref(1)?).unwrap_or_default()))
    })?;
    rows.collect()
}

/// How many recallable events have no vector of model `m` (an erased event, whose content is
/// empty, needs none).
pub(crate) fn missing_count(conn: &Connection, m: Model) -> rusqlite::Result<u64> {
    conn.query_row(
        &format!(
            "SELECT count(*) FROM events e WHERE e.kind IN ({}) AND e.content <> ''
               AND NOT EXISTS (SELECT 1 FROM pmm_vectors v WHERE v.key = (?1 << 40) | e.id)",
            super::fts::kinds_sql()
        ),
        [m.mid],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n.max(0) as u64)
}

/// The stored (quantized) vectors of model `m`, oldest event first, at most `limit`.
pub(crate) fn stored(
    conn: &Connection,
    m: Model,
    limit: usize,
) -> rusqlite::Result<Vec<(i64, Vec<u8>)>> {
    let sql = if keyed(conn)? {
        "SELECT key - (?1 << 40), q FROM pmm_vectors
         WHERE key >= (?1 << 40) AND key < ((?1 + 1) << 40) ORDER BY key LIMIT ?2"
    } else {
        "SELECT id, q FROM pmm_vectors WHERE mid = ?1 ORDER BY id LIMIT ?2"
    };
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params![m.mid, limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// Where a search reads.
pub(crate) struct Reading<'a> {
    /// The ledger's connection.
    pub conn: &'a Connection,
    /// A second connection to the same ledger, read-only, to split each step over (none: one
    /// core, or inside a write transaction, whose view another connection would not share).
    pub helper: Option<&'a mut Connection>,
    /// The packs kept in memory by a process that searches many times.
    pub packs: Option<&'a Mutex<PackCache>>,
}

/// The events of model `m` nearest to `query` among those before `before`: `(id, cosine)`,
/// best first (ties by id), at most `k`. With a helper connection each step is split in two
/// halves, one on each connection, run at the same time; with packs kept in memory the first
/// step reads only the pack rows that changed and scores in two threads.
pub(crate) fn search(
    r: Reading<'_>,
    m: Model,
    query: &[f32],
    before: i64,
    k: usize,
    limits: Limits,
) -> rusqlite::Result<Vec<(i64, f64)>> {
    if query.len() != m.dim || k == 0 {
        return Ok(Vec::new());
    }
    let code = QueryCode::new(query);
    let conn = r.conn;
    let chunks: i64 = conn.query_row(
        "SELECT coalesce(max(chunk) + 1, 0) FROM pmm_vector_pack WHERE mid = ?1",
        [m.mid],
        |r| r.get(0),
    )?;
    let mut helper = r.helper;
    // The kept packs: brought up to date under the cache's lock, then scored without it
    // (the rows are shared), so that concurrent searches of one process do not queue.
    let kept = match r.packs {
        Some(p) => {
            let mut packs = p.lock().unwrap_or_else(|e| e.into_inner());
            packs.refresh(conn, m)?.then(|| packs.rows())
        }
        None => None,
    };
    let near = match &kept {
        Some(rows) => nearest_in_memory(rows, &code, before, limits.prefilter),
        _ => {
            let (parts, h) = both(conn, helper, |c, part, parts| {
                let (part, parts) = (part as i64, parts as i64);
                let (lo, hi) = (chunks * part / parts, chunks * (part + 1) / parts);
                nearest(c, m, &code, (lo, hi), before, limits.prefilter)
            })?;
            helper = h;
            merged(parts)
        }
    };
    drop(kept);
    let total = usize::try_from(chunks).unwrap_or(0) * CHUNK;
    let keep = limits.candidates.min(candidates(total));
    let mut ids = near.best_by_two_bit_score(keep);
    // In id order, the rows are read in the order they are stored.
    ids.sort_unstable();
    let (scored, _) = both(conn, helper, |c, part, parts| {
        let (lo, hi) = (ids.len() * part / parts, ids.len() * (part + 1) / parts);
        exact(c, m, &ids[lo..hi], query)
    })?;
    let scored: Vec<(i64, f64)> = scored
        .0
        .into_iter()
        .chain(scored.1.into_iter().flatten())
        .collect();
    Ok(best_exact(scored, k))
}

/// `work(connection, part, parts)` on `conn` alone (part 0 of 1), or on `conn` and `helper`
/// at the same time (parts 0 and 1 of 2); the helper is handed back for the next step.
#[allow(clippy::type_complexity)]
fn both<'h, T: Send>(
    conn: &Connection,
    helper: Option<&'h mut Connection>,
    work: impl Fn(&Connection, usize, usize) -> rusqlite::Result<T> + Sync,
) -> rusqlite::Result<((T, Option<T>), Option<&'h mut Connection>)> {
    let Some(h) = helper else {
        return Ok(((work(conn, 0, 1)?, None), None));
    };
    let (mine, theirs, h) = std::thread::scope(|s| {
        let theirs = s.spawn(|| {
            let r = work(h, 1, 2);
            (r, h)
        });
        let mine = work(conn, 0, 2);
        let (theirs, h) = theirs
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (mine, theirs, h)
    });
    Ok(((mine?, Some(theirs?)), Some(h)))
}

/// Step 1 over the pack rows `chunks.0..chunks.1`, read one at a time.
fn nearest<'q>(
    conn: &Connection,
    m: Model,
    code: &'q QueryCode,
    chunks: (i64, i64),
    before: i64,
    keep: usize,
) -> rusqlite::Result<Nearest<'q>> {
    let vectors = usize::try_from(chunks.1 - chunks.0).unwrap_or(0) * CHUNK;
    let mut near = Nearest::new(code, before, keep, vectors);
    let mags = magnitudes_column(conn)?;
    // A scan, not a range of the key (`+`): SQLite compares each row of a range with its
    // bounds, and reads the whole row (100 KB over overflow pages) to compare a key whose
    // row overflows; a scan tests the columns in the row's first page. Reading the packs
    // took 41 ms with the range, 23 ms with the scan (one connection, 10^6 vectors).
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT ids, bits, {mags} FROM pmm_vector_pack
         WHERE +mid = ?1 AND +chunk >= ?2 AND +chunk < ?3"
    ))?;
    let mut rows = stmt.query(params![m.mid, chunks.0, chunks.1])?;
    while let Some(row) = rows.next()? {
        let (ids, bits, mags) = (row.get_ref(0)?, row.get_ref(1)?, row.get_ref(2)?);
        near.row(ids.as_blob()?, bits.as_blob()?, mags.as_blob()?);
    }
    Ok(near)
}

/// Whether the vectors are keyed by one integer (migration 5); a ledger that only readers
/// have opened since has them keyed by `(mid, id)`, and is read as it is.
fn keyed(conn: &Connection) -> rusqlite::Result<bool> {
    Ok(super::schema::of(conn)?.vectors_keyed())
}

/// What to select for the packs' magnitude bits: `mags`, or `x''` in a ledger that only
/// readers have opened since migration 6 added them (it is searched by the sign bits alone
/// until a writer opens it).
fn magnitudes_column(conn: &Connection) -> rusqlite::Result<&'static str> {
    let has = super::schema::of(conn)?.pack_has_mags();
    Ok(if has { "mags" } else { "x''" })
}

/// Step 3: the exact dot products of the vectors `ids` with `query` (a vector erased since
/// step 1 is left out).
fn exact(
    conn: &Connection,
    m: Model,
    ids: &[i64],
    query: &[f32],
) -> rusqlite::Result<Vec<(i64, f64)>> {
    // One statement for all of them (the ids as a JSON array, each looked up by key): a
    // statement per id began and ended a read transaction for each, half of a look-up's time.
    let list = format!(
        "[{}]",
        ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
    );
    let sql = if keyed(conn)? {
        "SELECT v.key - (?1 << 40), v.q FROM json_each(?2) AS j CROSS JOIN pmm_vectors AS v
         WHERE v.key = (?1 << 40) | j.value"
    } else {
        "SELECT v.id, v.q FROM json_each(?2) AS j CROSS JOIN pmm_vectors AS v
         WHERE v.mid = ?1 AND v.id = j.value"
    };
    let mut get = conn.prepare_cached(sql)?;
    let mut rows = get.query(params![m.mid, list])?;
    let mut scored = Vec::with_capacity(ids.len());
    while let Some(r) = rows.next()? {
        if let Some(s) = dot_quantized(r.get_ref(1)?.as_blob()?, query) {
            scored.push((r.get(0)?, f64::from(s)));
        }
    }
    Ok(scored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vector::codes::tests::unit;

    /// A search on `c` alone.
    fn on(c: &Connection) -> Reading<'_> {
        Reading {
            conn: c,
            helper: None,
            packs: None,
        }
    }

    fn conn() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY, kind TEXT, content TEXT);")
            .unwrap();
        c.execute_batch(MIGRATION).unwrap();
        c.execute_batch(MIGRATION_KEYED).unwrap();
        c.execute_batch(MIGRATION_MAGNITUDES).unwrap();
        c
    }

    #[test]
    fn search_is_exhaustive_and_independent_of_insertion_order() {
        let (a, b) = (conn(), conn());
        let ma = register(&a, "m", 16).unwrap();
        let mb = register(&b, "m", 16).unwrap();
        let vs: Vec<(i64, Vec<f32>)> = (1..=2500).map(|i| (i, unit(i as u64, 16))).collect();
        put(&a, ma, &vs).unwrap();
        let mut rev = vs.clone();
        rev.reverse();
        for part in rev.chunks(700) {
            put(&b, mb, part).unwrap();
        }
        let q = unit(7, 16);
        let (ra, rb) = (
            search(on(&a), ma, &q, i64::MAX, 10, LIMITS).unwrap(),
            search(on(&b), mb, &q, i64::MAX, 10, LIMITS).unwrap(),
        );
        assert_eq!(ra, rb);
        assert_eq!(ra[0].0, 7, "the query's own vector is nearest");
        assert!(search(on(&a), ma, &q, 7, 10, LIMITS)
            .unwrap()
            .iter()
            .all(|(id, _)| *id < 7));
        assert_eq!(
            put(&a, ma, &vs[..5]).unwrap(),
            0,
            "a second vector is ignored"
        );
        let packed: i64 = a
            .query_row("SELECT sum(n) FROM pmm_vector_pack", [], |r| r.get(0))
            .unwrap();
        assert_eq!(packed, 2500);
    }

    #[test]
    fn models_never_mix() {
        let c = conn();
        let m1 = register(&c, "one", 8).unwrap();
        let m2 = register(&c, "two", 8).unwrap();
        assert_ne!(m1.mid, m2.mid);
        put(&c, m1, &[(1, unit(1, 8))]).unwrap();
        let find = |m| search(on(&c), m, &unit(1, 8), i64::MAX, 5, LIMITS).unwrap();
        assert!(find(m2).is_empty());
        assert_eq!(find(m1).len(), 1);
        assert_eq!(
            register(&c, "one", 99).unwrap(),
            m1,
            "a model keeps its row"
        );
    }

    /// Centre `centre` plus `noise` times a random unit vector (`seed`), normalised.
    fn noisy(centre: u64, seed: u64, dim: usize, noise: f32) -> Vec<f32> {
        let (c, e) = (unit(centre, dim), unit(seed, dim));
        let v: Vec<f32> = c.iter().zip(&e).map(|(a, b)| a + noise * b).collect();
        let norm = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        v.iter().map(|a| a / norm).collect()
    }

    /// `n` vectors around `centres` centres: clusters of near-paraphrases.
    fn clustered(n: usize, centres: u64, dim: usize, noise: f32) -> Vec<(i64, Vec<f32>)> {
        (0..n)
            .map(|i| {
                let v = noisy(i as u64 % centres, 1_000_000 + i as u64, dim, noise);
                (i as i64 + 1, v)
            })
            .collect()
    }

    #[test]
    fn with_every_vector_a_candidate_the_search_is_exact_search() {
        // Clusters of near-duplicates (near-ties); 3,000 vectors, each step keeping all.
        let c = conn();
        let m = register(&c, "m", 48).unwrap();
        let vs = clustered(3_000, 6, 48, 0.8);
        put(&c, m, &vs).unwrap();
        let all = Limits {
            prefilter: 3_000,
            candidates: 3_000,
        };
        for s in 0..4 {
            let q = noisy(s, 500 + s, 48, 1.5);
            let mut exact: Vec<(i64, f64)> = vs
                .iter()
                .map(|(id, v)| (*id, f64::from(dot_quantized(&quantize(v), &q).unwrap())))
                .collect();
            exact.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            exact.truncate(50);
            assert_eq!(search(on(&c), m, &q, i64::MAX, 50, all).unwrap(), exact);
        }
    }

    #[test]
    fn packs_are_rebuilt_from_the_stored_vectors_as_they_were_written() {
        let c = conn();
        let m = register(&c, "m", 24).unwrap();
        let vs = clustered(2_500, 5, 24, 0.9);
        for part in vs.chunks(300) {
            put(&c, m, part).unwrap();
        }
        let packs = |c: &Connection| -> Vec<PackRow> {
            let sql = format!(
                "SELECT {} FROM pmm_vector_pack ORDER BY chunk",
                PackRow::COLUMNS
            );
            let mut st = c.prepare(&sql).unwrap();
            let rows = st.query_map([], PackRow::read).unwrap();
            rows.collect::<rusqlite::Result<_>>().unwrap()
        };
        let before = packs(&c);
        assert_eq!(before.len(), 3);
        assert!(before
            .iter()
            .all(|p| p.mags.len() == p.bits.len() && !p.mags.is_empty()));
        c.execute("UPDATE pmm_vector_pack SET mags = x''", [])
            .unwrap();
        let q = unit(3, 24);
        let signs_only = search(on(&c), m, &q, i64::MAX, 5, LIMITS).unwrap();
        assert_eq!(
            signs_only.len(),
            5,
            "packs without magnitude bits are still searched"
        );
        repack(&c).unwrap();
        assert_eq!(packs(&c), before);
    }

    #[test]
    fn packs_kept_in_memory_follow_appends_erasures_and_the_model() {
        let c = conn();
        let (m1, m2) = (
            register(&c, "a", 24).unwrap(),
            register(&c, "b", 24).unwrap(),
        );
        let vs = clustered(6_000, 6, 24, 0.9);
        put(&c, m1, &vs[..5_200]).unwrap();
        put(&c, m2, &vs[..500]).unwrap();
        let cache = Mutex::new(PackCache::default());
        let limits = Limits {
            prefilter: 400,
            candidates: 60,
        };
        let check = |m: Model, s: u64| {
            let q = noisy(s % 6, 900 + s, 24, 1.2);
            let kept = Reading {
                conn: &c,
                helper: None,
                packs: Some(&cache),
            };
            let want = search(on(&c), m, &q, i64::MAX, 20, limits).unwrap();
            assert_eq!(search(kept, m, &q, i64::MAX, 20, limits).unwrap(), want);
            want
        };
        check(m1, 1);
        assert_eq!(cache.lock().unwrap().rows().len(), 6, "read in one scan");
        put(&c, m1, &vs[5_200..]).unwrap();
        let top = check(m1, 2);
        forget(&c, top[0].0).unwrap();
        assert!(check(m1, 2).iter().all(|(id, _)| *id != top[0].0));
        forget(&c, 5).unwrap();
        check(m1, 3);
        check(m2, 4);
        assert_eq!(
            cache.lock().unwrap().rows().len(),
            1,
            "the other model's packs"
        );
        check(m1, 5);
    }

    #[test]
    fn a_search_split_over_two_connections_finds_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.db");
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE events (id INTEGER PRIMARY KEY);")
            .unwrap();
        c.execute_batch(MIGRATION).unwrap();
        c.execute_batch(MIGRATION_KEYED).unwrap();
        c.execute_batch(MIGRATION_MAGNITUDES).unwrap();
        let m = register(&c, "m", 32).unwrap();
        put(&c, m, &clustered(5_000, 7, 32, 1.0)).unwrap();
        let mut helper = Connection::open(&path).unwrap();
        let limits = Limits {
            prefilter: 700,
            candidates: 90,
        };
        for s in 0..5 {
            let q = unit(s, 32);
            let one = search(on(&c), m, &q, 4_000, 20, limits).unwrap();
            let both = Reading {
                conn: &c,
                helper: Some(&mut helper),
                packs: None,
            };
            let two = search(both, m, &q, 4_000, 20, limits).unwrap();
            assert_eq!(one, two);
            assert_eq!(one.len(), 20);
        }
    }
}
