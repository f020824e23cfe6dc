//! A model's packs kept in memory by a process that searches many times (turns read from
//! stdin or `--chat`, `pmm-recall --lines`, `pmm-mcp`): before each search only the pack rows
//! that changed are read again (the last row, where new vectors go; a row an erasure
//! shortened; every row when the model or the packs' format changed), so the first step of
//! a search scores codes already in memory instead of reading 10^2 MB of rows through SQLite.
//! At most [`CACHED_BYTES`]: a larger model's packs are read from the ledger every time.

use super::{magnitudes_column, Model, PackRow};
use rusqlite::{params, Connection};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The most pack bytes kept (ids and both codes: 104 bytes per 384-dimension vector, so
/// about 1.6·10^6 vectors).
pub const CACHED_BYTES: usize = 160 << 20;

/// The packs of the model searched last, as of the last search.
#[derive(Debug, Default)]
pub struct PackCache {
    /// The model and whether its packs had magnitude bits.
    of: Option<(i64, bool)>,
    /// Shared: a search scores a copy of this list (each row shared, not copied) after the
    /// cache's lock is released, so that the sessions of one server search at the same time.
    rows: Vec<Arc<PackRow>>,
    /// The ledger's newest erasure when the rows were read ([`super::super::Reads::last_erasure`]).
    erasure: i64,
}

impl PackCache {
    /// The rows, by chunk, shared.
    pub(super) fn rows(&self) -> Vec<Arc<PackRow>> {
        self.rows.clone()
    }

    /// Drops every row kept when the ledger's newest erasure is no longer `mark` (the one
    /// seen when they were read): an erased event's vector must not be searched again, and
    /// this does not rest on the row counts an erasure changes.
    pub fn forget_if_erased(&mut self, mark: i64) {
        if self.erasure != mark {
            *self = PackCache {
                erasure: mark,
                ..PackCache::default()
            };
        }
    }

    /// Brings the cache up to date with `m`'s packs as `conn` sees them; false (and empty)
    /// when they are larger than [`CACHED_BYTES`].
    pub(super) fn refresh(&mut self, conn: &Connection, m: Model) -> rusqlite::Result<bool> {
        let mut index: Vec<(i64, usize)> = conn
            // A scan (`+mid`), not a range of the key: see `nearest`.
            .prepare_cached("SELECT chunk, n FROM pmm_vector_pack WHERE +mid = ?1")?
            .query_map([m.mid], |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as usize))
            })?
            .collect::<rusqlite::Result<_>>()?;
        index.sort_unstable();
        let entry = 8 + 2 * m.dim.div_ceil(8);
        if index.iter().map(|(_, n)| n * entry).sum::<usize>() > CACHED_BYTES {
            *self = PackCache {
                erasure: self.erasure,
                ..PackCache::default()
            };
            return Ok(false);
        }
        let mags = magnitudes_column(conn)?;
        let of = Some((m.mid, mags == "mags"));
        if self.of != of {
            *self = PackCache {
                of,
                rows: Vec::new(),
                erasure: self.erasure,
            };
        }
        let last = index.last().map(|(chunk, _)| *chunk);
        let mut old: BTreeMap<i64, Arc<PackRow>> = std::mem::take(&mut self.rows)
            .into_iter()
            .map(|r| (r.chunk, r))
            .collect();
        let stale: Vec<i64> = index
            .iter()
            .filter(|(chunk, n)| {
                Some(*chunk) == last || old.get(chunk).is_none_or(|row| row.n != *n)
            })
            .map(|(chunk, _)| *chunk)
            .collect();
        let mut fresh = read_rows(conn, m.mid, mags, &stale)?;
        for (chunk, _) in index {
            let row = fresh.remove(&chunk).map(Arc::new);
            if let Some(row) = row.or_else(|| old.remove(&chunk)) {
                self.rows.push(row);
            }
        }
        Ok(true)
    }
}

/// The pack rows `chunks` of model `mid`: a few by key, many in one scan (`+mid`: see
/// `nearest`), as the first search of a process reads them all.
fn read_rows(
    conn: &Connection,
    mid: i64,
    mags: &str,
    chunks: &[i64],
) -> rusqlite::Result<BTreeMap<i64, PackRow>> {
    let columns = format!("chunk, n, ids, bits, {mags}");
    let mut out = BTreeMap::new();
    if chunks.len() <= 4 {
        let sql = format!("SELECT {columns} FROM pmm_vector_pack WHERE mid = ?1 AND chunk = ?2");
        let mut read = conn.prepare_cached(&sql)?;
        for chunk in chunks {
            out.insert(*chunk, read.query_row(params![mid, chunk], PackRow::read)?);
        }
        return Ok(out);
    }
    let wanted: std::collections::BTreeSet<i64> = chunks.iter().copied().collect();
    let sql = format!("SELECT {columns} FROM pmm_vector_pack WHERE +mid = ?1");
    let mut read = conn.prepare_cached(&sql)?;
    let mut rows = read.query([mid])?;
    while let Some(r) = rows.next()? {
        let row = PackRow::read(r)?;
        if wanted.contains(&row.chunk) {
            out.insert(row.chunk, row);
        }
    }
    Ok(out)
}
