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
//! - `pmm_vector_pack` holds, per model, chunks of [`CHUNK`] (event id, sign bits) pairs: one
//!   bit per dimension, so a search reads 8 + d/8 bytes per vector in a few hundred rows.
//!
//! A search is exhaustive and deterministic (the same vectors give the same ranking whatever
//! order they were added in; ties go by event id), with no approximate index, in three steps:
//! every vector of the model ranked by the Hamming distance of its sign bits to the query's
//! (the packs read one row at a time, keeping only what can still be among the nearest
//! [`PREFILTER`]), those re-ranked by their sign bits against the query's own values (an
//! asymmetric score, far closer to the cosine), and the best [`CANDIDATES`] of those scored
//! exactly with their stored vectors, read in id order. With a second core each step is split
//! over two connections.
//!
//! [`CANDIDATES`] is what makes the top 50 match exact search's: on 10^6 vectors clustered as
//! sentence embeddings are (many near-paraphrases of one another), the sign score orders the
//! vectors of one cluster poorly, and 2,000 candidates kept 93 % of exact search's top 50
//! (`scripts/vector-bench`), 10,000 keep 99.5 %. Each is a read by id, so a smaller ledger
//! scores fewer: one vector in [`EXACT_SHARE`], from [`MIN_CANDIDATES`] to [`CANDIDATES`].

use rusqlite::{params, Connection, OptionalExtension};

/// Vectors per pack row.
pub const CHUNK: usize = 1024;
/// Vectors a search keeps after the Hamming step.
pub const PREFILTER: usize = 100_000;
/// Vectors a search scores exactly, at most: one in [`EXACT_SHARE`] of the model's vectors,
/// at least [`MIN_CANDIDATES`].
pub const CANDIDATES: usize = 10_000;
/// Vectors a search scores exactly, at least (below that many vectors, the search is exact).
pub const MIN_CANDIDATES: usize = 2_000;
/// One vector in this many is scored exactly (between the two bounds above): each exact score
/// is a read by id, so a smaller ledger reads fewer (2,000 up to 2·10^5 vectors, 10,000 from
/// 10^6).
pub const EXACT_SHARE: usize = 100;

/// How many of `total` vectors a search scores exactly.
pub fn candidates(total: usize) -> usize {
    (total / EXACT_SHARE).clamp(MIN_CANDIDATES, CANDIDATES)
}

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

/// A model's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Model {
    /// Its key in the tables.
    pub mid: i64,
    /// Dimensions of its vectors.
    pub dim: usize,
}

/// Whether the ledger has the tables (a reference ledger, or one only readers opened, has not).
pub(crate) fn has_tables(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE name = 'pmm_embed_models')",
        [],
        |r| r.get(0),
    )
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

/// `v` as stored: one little-endian IEEE half float per dimension.
pub fn quantize(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect()
}

/// The dot product of a stored vector with `query` (`None` when the sizes differ).
pub fn dot_quantized(q: &[u8], query: &[f32]) -> Option<f32> {
    if q.len() != 2 * query.len() {
        return None;
    }
    Some(
        q.chunks_exact(2)
            .zip(query)
            .map(|(b, x)| half::f16::from_le_bytes([b[0], b[1]]).to_f32() * x)
            .sum(),
    )
}

/// Per group of 8 dimensions, the sum of ±query for each of the 256 sign patterns: the
/// asymmetric score of a vector's sign bits is then one look-up per byte.
fn sign_tables(query: &[f32]) -> Vec<[f32; 256]> {
    query
        .chunks(8)
        .map(|g| {
            let mut t = [0f32; 256];
            for (b, slot) in t.iter_mut().enumerate() {
                *slot = g
                    .iter()
                    .enumerate()
                    .map(|(k, x)| if b >> k & 1 == 1 { *x } else { -*x })
                    .sum();
            }
            t
        })
        .collect()
}

fn sign_score(tables: &[[f32; 256]], bits: &[u8]) -> f32 {
    bits.iter().zip(tables).map(|(b, t)| t[*b as usize]).sum()
}

/// One bit per dimension, set where the value is positive; `ceil(d/8)` bytes.
pub fn sign_bits(v: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; v.len().div_ceil(8)];
    for (i, x) in v.iter().enumerate() {
        if *x > 0.0 {
            out[i / 8] |= 1 << (i % 8);
        }
    }
    out
}

/// Step 1 of a search, fed one pack row at a time: the [`Limits::prefilter`] vectors (before
/// event `before`) whose sign bits are nearest to the query's, ties by id, with their bits. It
/// keeps only what can still be among them (a histogram of the kept distances gives the
/// largest distance that can), so the packs are never copied whole.
struct Nearest<'q> {
    qbits: &'q [u8],
    before: i64,
    keep: usize,
    /// Distances above this can no longer be kept.
    limit: u32,
    hist: Vec<usize>,
    /// `(distance, id)` of the vectors kept, and their bits one after another.
    kept: Vec<(u32, i64)>,
    bits: Vec<u8>,
    /// The current row's distances (a buffer kept between rows).
    dist: Vec<u32>,
}

impl<'q> Nearest<'q> {
    fn new(qbits: &'q [u8], before: i64, keep: usize) -> Self {
        Nearest {
            qbits,
            before,
            keep: keep.max(1),
            limit: u32::MAX,
            hist: vec![0; 8 * qbits.len() + 1],
            kept: Vec::new(),
            bits: Vec::new(),
            dist: Vec::new(),
        }
    }

    fn width(&self) -> usize {
        self.qbits.len().max(1)
    }

    /// One pack row: `ids` (8 bytes each) and their bits.
    fn row(&mut self, ids: &[u8], bits: &[u8]) {
        let mut dist = std::mem::take(&mut self.dist);
        distances(self.qbits, bits, &mut dist);
        let codes = ids.chunks_exact(8).zip(bits.chunks_exact(self.width()));
        for ((id, b), &d) in codes.zip(&dist) {
            let id = i64::from_le_bytes(id.try_into().unwrap_or_default());
            if d <= self.limit && id < self.before && b.len() == self.qbits.len() {
                self.hist[d as usize] += 1;
                self.kept.push((d, id));
                self.bits.extend_from_slice(b);
            }
        }
        self.dist = dist;
        if self.kept.len() >= 2 * self.keep {
            self.prune();
        }
    }

    /// Drops every vector farther than the smallest distance that `keep` of them are within.
    fn prune(&mut self) {
        let (mut within, mut limit) = (0, 0);
        while within + self.hist[limit] < self.keep {
            within += self.hist[limit];
            limit += 1;
        }
        self.limit = limit as u32;
        self.hist[limit + 1..].iter_mut().for_each(|h| *h = 0);
        let width = self.width();
        let mut to = 0;
        for from in 0..self.kept.len() {
            if self.kept[from].0 <= self.limit {
                self.kept[to] = self.kept[from];
                self.bits
                    .copy_within(from * width..(from + 1) * width, to * width);
                to += 1;
            }
        }
        self.kept.truncate(to);
        self.bits.truncate(to * width);
    }

    /// Takes in what another part of the search kept.
    fn absorb(&mut self, other: Nearest<'_>) {
        for (d, _) in &other.kept {
            self.hist[*d as usize] += 1;
        }
        self.kept.extend(other.kept);
        self.bits.extend(other.bits);
    }

    /// Step 2: the nearest [`Limits::prefilter`] re-ranked by the asymmetric score of their
    /// bits against the query's values (`tables`): the ids of the best `n`, in no order.
    fn best_by_sign_score(self, tables: &[[f32; 256]], n: usize) -> Vec<i64> {
        let width = self.width();
        let mut order: Vec<(u32, i64, usize)> = self
            .kept
            .iter()
            .enumerate()
            .map(|(i, (d, id))| (*d, *id, i))
            .collect();
        keep_best(&mut order, self.keep);
        let mut asym: Vec<(std::cmp::Reverse<OrdF32>, i64)> = order
            .into_iter()
            .map(|(_, id, i)| {
                let s = sign_score(tables, &self.bits[i * width..(i + 1) * width]);
                (std::cmp::Reverse(OrdF32(s)), id)
            })
            .collect();
        keep_best(&mut asym, n);
        asym.into_iter().map(|(_, id)| id).collect()
    }
}

/// Keeps the `n` smallest items (ties by the whole tuple, so by id), in no order.
fn keep_best<T: Ord>(v: &mut Vec<T>, n: usize) {
    if v.len() > n {
        v.select_nth_unstable(n);
        v.truncate(n);
    }
}

/// An `f32` ordered by `total_cmp`, for sorting scores.
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF32(f32);

impl Eq for OrdF32 {}

impl PartialOrd for OrdF32 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdF32 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The Hamming distance of each of the codes in `bits` (each as long as `q`) to `q`, into
/// `out`. With the CPU's POPCNT instruction where it has one: a build for generic x86-64 counts
/// bits without it, several instructions per word, and this is most of a search's arithmetic.
fn distances(q: &[u8], bits: &[u8], out: &mut Vec<u32>) {
    out.clear();
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has POPCNT (checked just now); the function is the portable one
        // compiled with that instruction allowed.
        unsafe { distances_popcnt(q, bits, out) };
        return;
    }
    distances_portable(q, bits, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn distances_popcnt(q: &[u8], bits: &[u8], out: &mut Vec<u32>) {
    distances_portable(q, bits, out);
}

#[inline(always)]
fn distances_portable(q: &[u8], bits: &[u8], out: &mut Vec<u32>) {
    out.extend(bits.chunks_exact(q.len().max(1)).map(|b| hamming(q, b)));
}

#[inline(always)]
fn hamming(a: &[u8], b: &[u8]) -> u32 {
    let mut d = 0;
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        let x = u64::from_le_bytes(x.try_into().unwrap_or_default());
        let y = u64::from_le_bytes(y.try_into().unwrap_or_default());
        d += (x ^ y).count_ones();
    }
    for (x, y) in ra.iter().zip(rb) {
        d += (x ^ y).count_ones();
    }
    d
}

/// Stores vectors of model `m` (inside the caller's write transaction); events that already
/// have one keep it. Returns how many were new.
pub(crate) fn put(
    conn: &Connection,
    m: Model,
    vectors: &[(i64, Vec<f32>)],
) -> rusqlite::Result<usize> {
    let mut fresh: Vec<(i64, Vec<u8>)> = Vec::new();
    {
        let mut ins = conn
            .prepare_cached("INSERT OR IGNORE INTO pmm_vectors (mid, id, q) VALUES (?1, ?2, ?3)")?;
        for (id, v) in vectors {
            if v.len() == m.dim && ins.execute(params![m.mid, id, quantize(v)])? == 1 {
                fresh.push((*id, sign_bits(v)));
            }
        }
    }
    pack(conn, m, &fresh)?;
    Ok(fresh.len())
}

/// Appends `(id, bits)` pairs to the model's last pack chunk, opening new ones as they fill.
fn pack(conn: &Connection, m: Model, fresh: &[(i64, Vec<u8>)]) -> rusqlite::Result<()> {
    let mut rest = fresh;
    while !rest.is_empty() {
        let last: Option<(i64, i64, Vec<u8>, Vec<u8>)> = conn
            .query_row(
                "SELECT chunk, n, ids, bits FROM pmm_vector_pack WHERE mid = ?1
                 ORDER BY chunk DESC LIMIT 1",
                [m.mid],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()?;
        let (chunk, n, mut ids, mut bits) = match last {
            Some((c, n, ids, bits)) if (n as usize) < CHUNK => (c, n as usize, ids, bits),
            Some((c, ..)) => (c + 1, 0, Vec::new(), Vec::new()),
            None => (0, 0, Vec::new(), Vec::new()),
        };
        let take = (CHUNK - n).min(rest.len());
        for (id, b) in &rest[..take] {
            ids.extend_from_slice(&id.to_le_bytes());
            bits.extend_from_slice(b);
        }
        conn.prepare_cached(
            "INSERT OR REPLACE INTO pmm_vector_pack (mid, chunk, n, ids, bits)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![m.mid, chunk, (n + take) as i64, ids, bits])?;
        rest = &rest[take..];
    }
    Ok(())
}

/// Forgets event `id`'s vectors, of every model: its rows and its entries in the packs
/// (`pmm-append --erase`). The packs are read whole, which an erasure can afford.
pub(crate) fn forget(conn: &Connection, id: i64) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM pmm_vectors WHERE id = ?1", [id])?;
    let key = id.to_le_bytes();
    let mut hits = Vec::new();
    {
        let mut stmt = conn.prepare("SELECT mid, chunk, n, ids, bits FROM pmm_vector_pack")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let ids: Vec<u8> = r.get(3)?;
            if let Some(at) = ids.chunks_exact(8).position(|c| c == key) {
                let (mid, chunk, n): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
                hits.push((mid, chunk, n, at, ids, r.get::<_, Vec<u8>>(4)?));
            }
        }
    }
    for (mid, chunk, n, at, mut ids, mut bits) in hits {
        let width = bits.len() / (n.max(1) as usize);
        ids.drain(at * 8..at * 8 + 8);
        bits.drain(at * width..(at + 1) * width);
        conn.execute(
            "UPDATE pmm_vector_pack SET n = ?3, ids = ?4, bits = ?5 WHERE mid = ?1 AND chunk = ?2",
            params![mid, chunk, n - 1, ids, bits],
        )?;
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
           AND NOT EXISTS (SELECT 1 FROM pmm_vectors v WHERE v.mid = ?2 AND v.id = e.id)
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
               AND NOT EXISTS (SELECT 1 FROM pmm_vectors v WHERE v.mid = ?1 AND v.id = e.id)",
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
    let mut stmt =
        conn.prepare_cached("SELECT id, q FROM pmm_vectors WHERE mid = ?1 ORDER BY id LIMIT ?2")?;
    let rows = stmt.query_map(params![m.mid, limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// How many vectors each step of a search keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Kept by the Hamming distance of the sign bits.
    pub prefilter: usize,
    /// Of those, kept by the asymmetric sign score and scored exactly.
    pub candidates: usize,
}

/// A search's limits: [`PREFILTER`], [`CANDIDATES`].
pub(crate) const LIMITS: Limits = Limits {
    prefilter: PREFILTER,
    candidates: CANDIDATES,
};

/// The events of model `m` nearest to `query` among those before `before`: `(id, cosine)`,
/// best first (ties by id), at most `k`. With a `helper` (a second connection to the same
/// ledger, read-only) each step is split in two halves, one on each connection, run at the
/// same time.
pub(crate) fn search(
    conn: &Connection,
    helper: Option<&mut Connection>,
    m: Model,
    query: &[f32],
    before: i64,
    k: usize,
    limits: Limits,
) -> rusqlite::Result<Vec<(i64, f64)>> {
    if query.len() != m.dim || k == 0 {
        return Ok(Vec::new());
    }
    let qbits = sign_bits(query);
    let chunks: i64 = conn.query_row(
        "SELECT coalesce(max(chunk) + 1, 0) FROM pmm_vector_pack WHERE mid = ?1",
        [m.mid],
        |r| r.get(0),
    )?;
    let (ids, helper) = both(conn, helper, |c, part, parts| {
        let (part, parts) = (part as i64, parts as i64);
        let (lo, hi) = (chunks * part / parts, chunks * (part + 1) / parts);
        nearest(c, m, &qbits, (lo, hi), before, limits.prefilter)
    })?;
    let mut near = ids.0;
    if let Some(other) = ids.1 {
        near.absorb(other);
    }
    let total = usize::try_from(chunks).unwrap_or(0) * CHUNK;
    let keep = limits.candidates.min(candidates(total));
    let mut ids = near.best_by_sign_score(&sign_tables(query), keep);
    // In id order, the rows are read in the order they are stored.
    ids.sort_unstable();
    let (scored, _) = both(conn, helper, |c, part, parts| {
        let (lo, hi) = (ids.len() * part / parts, ids.len() * (part + 1) / parts);
        exact(c, m, &ids[lo..hi], query)
    })?;
    let mut scored: Vec<(i64, f64)> = scored
        .0
        .into_iter()
        .chain(scored.1.into_iter().flatten())
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(k);
    Ok(scored)
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
    qbits: &'q [u8],
    chunks: (i64, i64),
    before: i64,
    keep: usize,
) -> rusqlite::Result<Nearest<'q>> {
    let mut near = Nearest::new(qbits, before, keep);
    let mut stmt = conn.prepare_cached(
        "SELECT ids, bits FROM pmm_vector_pack WHERE mid = ?1 AND chunk >= ?2 AND chunk < ?3",
    )?;
    let mut rows = stmt.query(params![m.mid, chunks.0, chunks.1])?;
    while let Some(row) = rows.next()? {
        near.row(row.get_ref(0)?.as_blob()?, row.get_ref(1)?.as_blob()?);
    }
    Ok(near)
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
    let mut get = conn.prepare_cached(
        "SELECT v.id, v.q FROM json_each(?2) AS j CROSS JOIN pmm_vectors AS v
         WHERE v.mid = ?1 AND v.id = j.value",
    )?;
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

    fn conn() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY, kind TEXT, content TEXT);")
            .unwrap();
        c.execute_batch(MIGRATION).unwrap();
        c
    }

    fn unit(seed: u64, dim: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let mut v: Vec<f32> = (0..dim)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect();
        let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        v.iter_mut().for_each(|a| *a /= n);
        v
    }

    #[test]
    fn stored_dots_are_close_to_exact_ones() {
        for s in 0..50 {
            let (a, b) = (unit(s, 384), unit(s + 1000, 384));
            let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            let got = dot_quantized(&quantize(&a), &b).unwrap();
            assert!((exact - got).abs() < 5e-4, "{exact} {got}");
        }
        assert_eq!(dot_quantized(&quantize(&[0.0; 4]), &[1.0; 4]), Some(0.0));
        assert_eq!(dot_quantized(&quantize(&[0.5; 4]), &[1.0; 3]), None);
    }

    #[test]
    fn the_asymmetric_score_is_the_dot_with_the_signs() {
        let q = unit(3, 20);
        let v = unit(4, 20);
        let signs: f32 = q
            .iter()
            .zip(&v)
            .map(|(x, y)| if *y > 0.0 { *x } else { -*x })
            .sum();
        let got = sign_score(&sign_tables(&q), &sign_bits(&v));
        assert!((signs - got).abs() < 1e-5, "{signs} {got}");
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
            search(&a, None, ma, &q, i64::MAX, 10, LIMITS).unwrap(),
            search(&b, None, mb, &q, i64::MAX, 10, LIMITS).unwrap(),
        );
        assert_eq!(ra, rb);
        assert_eq!(ra[0].0, 7, "the query's own vector is nearest");
        assert!(search(&a, None, ma, &q, 7, 10, LIMITS)
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
    fn distances_with_popcnt_are_the_portable_ones() {
        let q = sign_bits(&unit(1, 384));
        let bits: Vec<u8> = (0..40).flat_map(|s| sign_bits(&unit(s, 384))).collect();
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        distances(&q, &bits, &mut fast);
        distances_portable(&q, &bits, &mut slow);
        assert_eq!(fast, slow);
        assert_eq!(fast.len(), 40);
        assert_eq!(fast[1], 0, "the query's own code");
        let naive = |a: &[u8], b: &[u8]| -> u32 {
            a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
        };
        for (k, d) in fast.iter().enumerate() {
            assert_eq!(*d, naive(&q, &bits[k * 48..(k + 1) * 48]));
        }
    }

    #[test]
    fn models_never_mix() {
        let c = conn();
        let m1 = register(&c, "one", 8).unwrap();
        let m2 = register(&c, "two", 8).unwrap();
        assert_ne!(m1.mid, m2.mid);
        put(&c, m1, &[(1, unit(1, 8))]).unwrap();
        let find = |m| search(&c, None, m, &unit(1, 8), i64::MAX, 5, LIMITS).unwrap();
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
            assert_eq!(search(&c, None, m, &q, i64::MAX, 50, all).unwrap(), exact);
        }
    }

    #[test]
    fn the_streamed_prefilter_keeps_what_a_full_sort_keeps() {
        // Few distinct distances (8-bit codes), so the cut falls inside a run of ties.
        let q = [0b1010_1010u8];
        let keep = 37;
        let mut near = Nearest::new(&q, 900, keep);
        let mut all = Vec::new();
        for row in 0..10u64 {
            let ids: Vec<i64> = (0..100)
                .map(|k| (row * 100 + k) as i64 * 7 % 1000)
                .collect();
            let bits: Vec<u8> = ids.iter().map(|id| (id * 31 % 256) as u8).collect();
            let id_bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
            near.row(&id_bytes, &bits);
            all.extend(
                ids.iter()
                    .zip(&bits)
                    .filter(|(id, _)| **id < 900)
                    .map(|(id, b)| (hamming(&q, &[*b]), *id)),
            );
        }
        all.sort();
        all.truncate(keep);
        // Every sign score equal: the candidates are then the smallest ids among the kept.
        let flat = vec![[0f32; 256]];
        let mut got = near.best_by_sign_score(&flat, keep);
        got.sort_unstable();
        let mut want: Vec<i64> = all.into_iter().map(|(_, id)| id).collect();
        want.sort_unstable();
        assert_eq!(got, want);
    }

    #[test]
    fn a_search_split_over_two_connections_finds_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.db");
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE events (id INTEGER PRIMARY KEY);")
            .unwrap();
        c.execute_batch(MIGRATION).unwrap();
        let m = register(&c, "m", 32).unwrap();
        put(&c, m, &clustered(5_000, 7, 32, 1.0)).unwrap();
        let mut helper = Connection::open(&path).unwrap();
        let limits = Limits {
            prefilter: 700,
            candidates: 90,
        };
        for s in 0..5 {
            let q = unit(s, 32);
            let one = search(&c, None, m, &q, 4_000, 20, limits).unwrap();
            let two = search(&c, Some(&mut helper), m, &q, 4_000, 20, limits).unwrap();
            assert_eq!(one, two);
            assert_eq!(one.len(), 20);
        }
    }
}
