//! A search's first two steps over the packs' codes, whatever holds the packs: [`Nearest`]
//! keeps, one pack row at a time, what can still be among the best by the sign bits' distance
//! to the 4-bit query, then re-ranks those by both bits' score. The store reads the rows and
//! scores the last step's candidates exactly with the vectors it keeps.

use super::codes::QueryCode;

/// Vectors per pack row.
pub const CHUNK: usize = 1024;
/// Vectors a search keeps after the first step.
pub const PREFILTER: usize = 20_000;
/// Vectors a search scores exactly, at most: one in [`EXACT_SHARE`] of the model's vectors,
/// at least [`MIN_CANDIDATES`].
pub const CANDIDATES: usize = 10_000;
/// Vectors a search scores exactly, at least (below that many vectors, the search is exact).
pub const MIN_CANDIDATES: usize = 2_000;
/// One vector in this many is scored exactly (between the two bounds above): 2,000 up to
/// 8·10^5 vectors, 2,500 at 10^6.
pub const EXACT_SHARE: usize = 400;

/// How many of `total` vectors a search scores exactly.
pub fn candidates(total: usize) -> usize {
    (total / EXACT_SHARE).clamp(MIN_CANDIDATES, CANDIDATES)
}

/// How many vectors each step of a search keeps.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Kept by the Hamming distance of the sign bits.
    pub prefilter: usize,
    /// Of those, kept by the asymmetric sign score and scored exactly.
    pub candidates: usize,
}

/// A search's limits: [`PREFILTER`], [`CANDIDATES`].
pub const LIMITS: Limits = Limits {
    prefilter: PREFILTER,
    candidates: CANDIDATES,
};

/// Step 1 of a search, fed one pack row at a time: the [`Limits::prefilter`] vectors (before
/// event `before`) whose sign bits score best against the 4-bit query
/// ([`QueryCode::distances`]), ties by id, with their codes. It keeps only what can still be
/// among them (a histogram of the kept distances gives the largest distance that can), so the
/// packs are never copied whole.
pub struct Nearest<'q> {
    code: &'q QueryCode,
    before: i64,
    keep: usize,
    /// Distances above this can no longer be kept.
    limit: u32,
    hist: Vec<usize>,
    /// `(distance, id)` of the vectors kept, and their sign and magnitude bits one after
    /// another (magnitude bits all clear where a pack has none).
    kept: Vec<(u32, i64)>,
    codes: Vec<u8>,
    /// The current row's distances (a buffer kept between rows).
    dist: Vec<u32>,
}

impl<'q> Nearest<'q> {
    /// For at most `vectors` vectors. Its buffers are allocated here, whole (never in a
    /// thread that a search starts for its other half: a thread that ends leaves what it
    /// allocated to the allocator's bookkeeping, and a process that searches many times grew
    /// by megabytes a search).
    pub fn new(code: &'q QueryCode, before: i64, keep: usize, vectors: usize) -> Self {
        let keep = keep.max(1);
        let most = vectors.min(2 * keep + CHUNK);
        Nearest {
            code,
            before,
            keep,
            limit: u32::MAX,
            hist: vec![0; code.distance_range()],
            kept: Vec::with_capacity(most),
            codes: Vec::with_capacity(most * 2 * code.width()),
            dist: Vec::with_capacity(CHUNK),
        }
    }

    /// One pack row: `ids` (8 bytes each), their sign bits and their magnitude bits (`mags`
    /// empty in a pack written before there were any).
    pub fn row(&mut self, ids: &[u8], bits: &[u8], mags: &[u8]) {
        let width = self.code.width().max(1);
        if bits.len() != ids.len() / 8 * width || !(mags.is_empty() || mags.len() == bits.len()) {
            return;
        }
        let mut dist = std::mem::take(&mut self.dist);
        self.code.distances(bits, &mut dist);
        for (k, (id, &d)) in ids.chunks_exact(8).zip(&dist).enumerate() {
            let id = i64::from_le_bytes(id.try_into().unwrap_or_default());
            if d <= self.limit && id < self.before {
                self.hist[d as usize] += 1;
                self.kept.push((d, id));
                self.codes
                    .extend_from_slice(&bits[k * width..(k + 1) * width]);
                match mags.get(k * width..(k + 1) * width) {
                    Some(m) => self.codes.extend_from_slice(m),
                    None => self.codes.resize(self.codes.len() + width, 0),
                }
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
        let entry = 2 * self.code.width();
        let mut to = 0;
        for from in 0..self.kept.len() {
            if self.kept[from].0 <= self.limit {
                self.kept[to] = self.kept[from];
                self.codes
                    .copy_within(from * entry..(from + 1) * entry, to * entry);
                to += 1;
            }
        }
        self.kept.truncate(to);
        self.codes.truncate(to * entry);
    }

    /// Takes in what another part of the search kept: of the two together, what can still
    /// be among the best `keep` (the two pruned to their joint limit first, so that little
    /// is copied: copying all of both cost 3 ms of a 10^6-vector search).
    pub fn absorb(&mut self, other: Nearest<'_>) {
        for (d, _) in &other.kept {
            self.hist[*d as usize] += 1;
        }
        if self.kept.len() + other.kept.len() >= self.keep {
            self.prune();
        }
        let entry = 2 * self.code.width();
        for (k, &(d, id)) in other.kept.iter().enumerate() {
            if d <= self.limit {
                self.kept.push((d, id));
                self.codes
                    .extend_from_slice(&other.codes[k * entry..(k + 1) * entry]);
            }
        }
    }

    /// Step 2: the nearest [`Limits::prefilter`] re-ranked by the score of their sign and
    /// magnitude bits against the query's own values ([`QueryCode::score`]): the ids of the
    /// best `n`, in no order.
    pub fn best_by_two_bit_score(self, n: usize) -> Vec<i64> {
        let width = self.code.width();
        let mut order: Vec<(u32, i64, usize)> = self
            .kept
            .iter()
            .enumerate()
            .map(|(i, (d, id))| (*d, *id, i))
            .collect();
        keep_best(&mut order, self.keep);
        let mut scored: Vec<(std::cmp::Reverse<OrdF32>, i64)> = order
            .into_iter()
            .map(|(_, id, i)| {
                let entry = &self.codes[2 * i * width..2 * (i + 1) * width];
                let s = self.code.score(&entry[..width], &entry[width..]);
                (std::cmp::Reverse(OrdF32(s)), id)
            })
            .collect();
        keep_best(&mut scored, n);
        scored.into_iter().map(|(_, id)| id).collect()
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

/// What the parts of a first step kept, together.
pub fn merged<'q>((mut near, other): (Nearest<'q>, Option<Nearest<'q>>)) -> Nearest<'q> {
    if let Some(other) = other {
        near.absorb(other);
    }
    near
}

/// A pack row as a search reads it: event ids (8 little-endian bytes each), their sign bits
/// and their magnitude bits (empty in a pack written before there were any).
pub trait PackCodes: Sync {
    /// How many vectors the row holds.
    fn len(&self) -> usize;
    /// Whether it holds none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `(ids, sign bits, magnitude bits)`.
    fn codes(&self) -> (&[u8], &[u8], &[u8]);
}

/// A shared row reads as the row (a cache hands out its rows shared, so that a search scores
/// them without holding the cache).
impl<T: PackCodes + Send> PackCodes for std::sync::Arc<T> {
    fn len(&self) -> usize {
        (**self).len()
    }

    fn codes(&self) -> (&[u8], &[u8], &[u8]) {
        (**self).codes()
    }
}

/// Step 1 over packs kept in memory: in two threads when the machine has a second core.
pub fn nearest_in_memory<'q, R: PackCodes>(
    rows: &[R],
    code: &'q QueryCode,
    before: i64,
    keep: usize,
) -> Nearest<'q> {
    let start = |rows: &[R]| Nearest::new(code, before, keep, rows.iter().map(R::len).sum());
    let feed = |mut near: Nearest<'q>, rows: &[R]| {
        for r in rows {
            let (ids, bits, mags) = r.codes();
            near.row(ids, bits, mags);
        }
        near
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 || rows.len() < 2 {
        return feed(start(rows), rows);
    }
    let (mine, theirs) = rows.split_at(rows.len() / 2);
    let (near, other) = (start(mine), start(theirs));
    std::thread::scope(|s| {
        let other = s.spawn(|| feed(other, theirs));
        let near = feed(near, mine);
        let other = other
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        merged((near, Some(other)))
    })
}

/// The `k` best of exactly scored `(id, cosine)` pairs: best first, ties by id.
pub fn best_exact(mut scored: Vec<(i64, f64)>, k: usize) -> Vec<(i64, f64)> {
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(k);
    scored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_streamed_prefilter_keeps_what_a_full_sort_keeps() {
        // 8-dimension codes have few distinct distances, so the cut falls inside a run of
        // ties.
        let code = QueryCode::new(&[0.3, -0.2, 0.1, 0.0, -0.4, 0.25, 0.05, -0.1]);
        let keep = 37;
        let mut near = Nearest::new(&code, 900, keep, 1_000);
        let mut all = Vec::new();
        for row in 0..10u64 {
            let ids: Vec<i64> = (0..100)
                .map(|k| (row * 100 + k) as i64 * 7 % 1000)
                .collect();
            let bits: Vec<u8> = ids.iter().map(|id| (id * 31 % 256) as u8).collect();
            let id_bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
            near.row(&id_bytes, &bits, &[]);
            let mut dist = Vec::new();
            code.distances(&bits, &mut dist);
            all.extend(
                ids.iter()
                    .zip(dist)
                    .filter(|(id, _)| **id < 900)
                    .map(|(id, d)| (d, *id)),
            );
        }
        all.sort();
        all.truncate(keep);
        let mut kept: Vec<(u32, i64)> = near.kept.clone();
        kept.sort();
        kept.truncate(keep);
        assert_eq!(kept, all);
        let mut got = near.best_by_two_bit_score(keep);
        got.sort_unstable();
        let mut want: Vec<i64> = all.into_iter().map(|(_, id)| id).collect();
        want.sort_unstable();
        assert_eq!(got, want);
    }
}
