//! The codes a vector search ranks by before it reads any vector whole: per stored vector,
//! one sign bit and one magnitude bit per dimension; per query, its values at 4 bits each
//! (for the first step, all in integers: bit planes and `POPCNT`) and as per-byte tables of
//! sums (for the second, in floating point).
//!
//! Together the two bits are the optimal 2-level quantizer of a Gaussian per sign (Lloyd and
//! Max): a value is read back as ±[`LOW`] or ±[`HIGH`] times 1/√d, the split at
//! [`MAGNITUDE_SPLIT`]/√d; sentence embeddings' values are close enough to Gaussian for this
//! to hold (measured on all-MiniLM-L6-v2's: docs/recall.md).

/// A value's magnitude bit is set above this times 1/√d.
pub const MAGNITUDE_SPLIT: f32 = 0.9816;
/// The magnitude a clear magnitude bit stands for, times 1/√d.
pub const LOW: f32 = 0.4528;
/// The magnitude a set magnitude bit stands for, times 1/√d.
pub const HIGH: f32 = 1.510;

/// `v` as stored: one little-endian IEEE half float per dimension.
pub fn quantize(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect()
}

/// A stored vector's values.
pub fn dequantize(q: &[u8]) -> Vec<f32> {
    q.chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect()
}

/// The dot product of a stored vector with `query` (`None` when the sizes differ). The half
/// floats are widened 64 at a time by `half`'s slice conversion, which uses the CPU's F16C
/// instructions where it has them (one at a time, each conversion checked for them: 3 % of
/// a turn's time at 10^6 vectors); the products are summed in the same order either way.
pub fn dot_quantized(q: &[u8], query: &[f32]) -> Option<f32> {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    if q.len() != 2 * query.len() {
        return None;
    }
    let (mut bits, mut wide, mut sum) = ([0u16; 64], [0f32; 64], 0f32);
    for (bytes, x) in q.chunks(128).zip(query.chunks(64)) {
        let n = x.len();
        for (b, slot) in bytes.chunks_exact(2).zip(&mut bits[..n]) {
            *slot = u16::from_le_bytes([b[0], b[1]]);
        }
        let halves: &[half::f16] = bits[..n].reinterpret_cast();
        halves.convert_to_f32_slice(&mut wide[..n]);
        for (v, y) in wide[..n].iter().zip(x) {
            sum += v * y;
        }
    }
    Some(sum)
}

/// One bit per dimension, set where the value is positive; `ceil(d/8)` bytes.
pub fn sign_bits(v: &[f32]) -> Vec<u8> {
    bits_where(v, |x| x > 0.0)
}

/// One bit per dimension, set where the value's magnitude is above [`MAGNITUDE_SPLIT`]/√d.
pub fn magnitude_bits(v: &[f32]) -> Vec<u8> {
    let split = MAGNITUDE_SPLIT / (v.len().max(1) as f32).sqrt();
    bits_where(v, |x| x.abs() > split)
}

fn bits_where(v: &[f32], set: impl Fn(f32) -> bool) -> Vec<u8> {
    let mut out = vec![0u8; v.len().div_ceil(8)];
    for (i, x) in v.iter().enumerate() {
        if set(*x) {
            out[i / 8] |= 1 << (i % 8);
        }
    }
    out
}

/// A query as the two cheap steps of a search score codes against it.
pub struct QueryCode {
    /// Bytes of one code (a vector's sign bits, or its magnitude bits).
    width: usize,
    /// The query's values at 4 bits, `u = round(x/Δ + 7.5)` in 0..=15, as four bit planes
    /// (plane `j` holds bit `j` of each `u`): per 64-bit word of a code, its four planes.
    interleaved: Vec<[u64; 4]>,
    /// 15 times the dimensions: the largest first-step score.
    top: u32,
    /// Per byte of a code, the sum of the query's values over each of the 256 bit patterns.
    tables: Vec<[f32; 256]>,
}

impl QueryCode {
    /// The code of `query`.
    pub fn new(query: &[f32]) -> QueryCode {
        let width = query.len().div_ceil(8);
        let step = query.iter().fold(0f32, |m, x| m.max(x.abs())) / 7.5;
        let mut interleaved = vec![[0u64; 4]; width.div_ceil(8)];
        for (i, x) in query.iter().enumerate() {
            let u = if step > 0.0 {
                (x / step + 7.5).round().clamp(0.0, 15.0) as u32
            } else {
                8
            };
            for (j, plane) in interleaved[i / 64].iter_mut().enumerate() {
                *plane |= u64::from(u >> j & 1) << (i % 64);
            }
        }
        QueryCode {
            width,
            interleaved,
            top: 15 * query.len() as u32,
            tables: sum_tables(query),
        }
    }

    /// Bytes of one code.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The largest [`QueryCode::distances`] value, plus one.
    pub fn distance_range(&self) -> usize {
        2 * self.top as usize + 1
    }

    /// Step 1: for each sign code in `bits`, `15·d − Σ_i b_i·(2u_i − 15)` (0 ..= 30·d; smaller
    /// is nearer): the asymmetric score of the signs against the 4-bit query, which is
    /// `Σ (u_i − 7.5)(2b_i − 1)` less a constant of the query's, as
    /// `2·Σ_j 2^j·popcount(b & plane_j) − 15·popcount(b)`, counted 8 words at a time with
    /// AVX-512's `VPOPCNTQ` where the CPU has it, else with its `POPCNT` instruction (both
    /// detected at run time; a build for generic x86-64 would count bits without them). The
    /// three give the same distances: 500,000 codes of 384 bits in 2.4 ms with AVX-512, 5.0 ms
    /// with `POPCNT`, on one core.
    pub fn distances(&self, bits: &[u8], out: &mut Vec<u32>) {
        out.clear();
        #[cfg(target_arch = "x86_64")]
        if wide::available() {
            // SAFETY: the CPU has AVX-512 F, BW and VPOPCNTDQ (checked just now).
            unsafe { wide::distances(self, bits, out) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: the CPU has POPCNT (checked just now); the function is the portable
            // one compiled with that instruction allowed.
            unsafe { self.distances_popcnt(bits, out) };
            return;
        }
        self.distances_portable(bits, out);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    unsafe fn distances_popcnt(&self, bits: &[u8], out: &mut Vec<u32>) {
        self.distances_portable(bits, out);
    }

    /// A plain loop, no iterator adapters: their closures would be compiled apart from
    /// [`QueryCode::distances_popcnt`], without its `POPCNT`.
    #[inline(always)]
    fn distances_portable(&self, bits: &[u8], out: &mut Vec<u32>) {
        let top = self.top as i64;
        let whole = self.width / 8;
        let width = self.width.max(1);
        out.reserve(bits.len() / width);
        let mut at = 0;
        while at + width <= bits.len() {
            let code = &bits[at..at + width];
            let (mut weighted, mut ones) = (0u32, 0u32);
            for w in 0..whole {
                let mut x = [0u8; 8];
                x.copy_from_slice(&code[8 * w..8 * w + 8]);
                (weighted, ones) =
                    add_word(u64::from_le_bytes(x), &self.interleaved[w], weighted, ones);
            }
            if whole < self.interleaved.len() {
                let mut tail = [0u8; 8];
                tail[..self.width - 8 * whole].copy_from_slice(&code[8 * whole..]);
                let planes = &self.interleaved[whole];
                (weighted, ones) = add_word(u64::from_le_bytes(tail), planes, weighted, ones);
            }
            out.push((top - (2 * i64::from(weighted) - 15 * i64::from(ones))) as u32);
            at += width;
        }
    }

    /// Step 2: the asymmetric score of a vector's two bits per dimension against the query's
    /// own values, `Σ x_i·s_i·(LOW + (HIGH − LOW)·m_i)` less a constant of the query's (higher
    /// is nearer). `mags` empty: every magnitude bit clear (the sign bits alone).
    pub fn score(&self, bits: &[u8], mags: &[u8]) -> f32 {
        let (mut signs, mut big_signs, mut big) = (0f32, 0f32, 0f32);
        for (k, (b, t)) in bits.iter().zip(&self.tables).enumerate() {
            signs += t[*b as usize];
            if let Some(m) = mags.get(k) {
                big_signs += t[(b & m) as usize];
                big += t[*m as usize];
            }
        }
        2.0 * LOW * signs + (HIGH - LOW) * (2.0 * big_signs - big)
    }
}

/// Step 1 with AVX-512: a code's words (up to 8 at a time, one 512-bit register) against the
/// query's four planes, their bits counted by `VPOPCNTQ` in every lane at once and the lanes
/// summed once per code. Integers throughout, so the distances are those of
/// [`QueryCode::distances_portable`], bit for bit (a test compares them).
#[cfg(target_arch = "x86_64")]
mod wide {
    use super::QueryCode;
    use std::arch::x86_64::*;

    /// Whether this CPU has what [`distances`] needs.
    pub fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vpopcntdq")
    }

    /// [`QueryCode::distances`]; the caller has checked [`available`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vpopcntdq")]
    pub unsafe fn distances(code: &QueryCode, bits: &[u8], out: &mut Vec<u32>) {
        let width = code.width.max(1);
        let chunks = code.width.div_ceil(64);
        // Per 64 bytes of a code: the four planes of its (up to) 8 words, and its byte mask.
        let mut planes = Vec::with_capacity(chunks);
        for k in 0..chunks {
            let mut p = [[0u64; 8]; 4];
            for (i, words) in code.interleaved.iter().skip(8 * k).take(8).enumerate() {
                for j in 0..4 {
                    p[j][i] = words[j];
                }
            }
            let p = p.map(|lanes| unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) });
            let len = (code.width - 64 * k).min(64);
            let mask: __mmask64 = if len == 64 { !0 } else { (1u64 << len) - 1 };
            planes.push((p, mask));
        }
        let top = i64::from(code.top);
        out.reserve(bits.len() / width);
        let mut at = 0;
        while at + width <= bits.len() {
            let mut acc = _mm512_setzero_si512();
            for (k, (p, mask)) in planes.iter().enumerate() {
                // SAFETY: the mask keeps the load inside this code's bytes.
                let x = unsafe {
                    _mm512_maskz_loadu_epi8(*mask, bits.as_ptr().add(at + 64 * k).cast())
                };
                let count = |plane| _mm512_popcnt_epi64(_mm512_and_si512(x, plane));
                let weighted = _mm512_add_epi64(
                    _mm512_add_epi64(count(p[0]), _mm512_slli_epi64::<1>(count(p[1]))),
                    _mm512_add_epi64(
                        _mm512_slli_epi64::<2>(count(p[2])),
                        _mm512_slli_epi64::<3>(count(p[3])),
                    ),
                );
                let ones = _mm512_popcnt_epi64(x);
                // 2·weighted − 15·ones, per lane.
                let lane = _mm512_sub_epi64(
                    _mm512_slli_epi64::<1>(weighted),
                    _mm512_sub_epi64(_mm512_slli_epi64::<4>(ones), ones),
                );
                acc = _mm512_add_epi64(acc, lane);
            }
            out.push((top - _mm512_reduce_add_epi64(acc)) as u32);
            at += width;
        }
    }
}

/// One 64-bit word of a sign code added to the running sums: `Σ_j 2^j·popcount(x & plane_j)`
/// and `popcount(x)`.
#[inline(always)]
fn add_word(x: u64, planes: &[u64; 4], weighted: u32, ones: u32) -> (u32, u32) {
    let w = (x & planes[0]).count_ones()
        + ((x & planes[1]).count_ones() << 1)
        + ((x & planes[2]).count_ones() << 2)
        + ((x & planes[3]).count_ones() << 3);
    (weighted + w, ones + x.count_ones())
}

/// Per group of 8 dimensions, the sum of the query's values over each of the 256 patterns of
/// set bits: a code's weighted sum is then one look-up per byte.
fn sum_tables(query: &[f32]) -> Vec<[f32; 256]> {
    query
        .chunks(8)
        .map(|g| {
            let mut t = [0f32; 256];
            for (b, slot) in t.iter_mut().enumerate() {
                *slot = g
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| b >> k & 1 == 1)
                    .map(|(_, x)| *x)
                    .sum();
            }
            t
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A pseudo-random unit vector of `dim` dimensions.
    pub(crate) fn unit(seed: u64, dim: usize) -> Vec<f32> {
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
        for dim in [384, 20, 130] {
            let (a, b) = (quantize(&unit(1, dim)), unit(2, dim));
            let one_at_a_time: f32 = a
                .chunks_exact(2)
                .zip(&b)
                .map(|(h, x)| half::f16::from_le_bytes([h[0], h[1]]).to_f32() * x)
                .sum();
            assert_eq!(dot_quantized(&a, &b), Some(one_at_a_time), "{dim}");
        }
        let v = unit(9, 20);
        let back = dequantize(&quantize(&v));
        assert!(v.iter().zip(&back).all(|(a, b)| (a - b).abs() < 1e-3));
    }

    /// `Σ x_i·s_i·level_i` with each level as the codes stand for it.
    fn reconstructed_dot(q: &[f32], v: &[f32]) -> f32 {
        let split = MAGNITUDE_SPLIT / (v.len() as f32).sqrt();
        q.iter()
            .zip(v)
            .map(|(x, y)| {
                let level = if y.abs() > split { HIGH } else { LOW };
                x * level * if *y > 0.0 { 1.0 } else { -1.0 }
            })
            .sum()
    }

    #[test]
    fn the_second_step_score_is_the_dot_with_the_two_bit_levels() {
        for (dim, s) in [(20, 3), (384, 4), (13, 5)] {
            let (q, v) = (unit(s, dim), unit(s + 100, dim));
            let code = QueryCode::new(&q);
            let constant = -LOW * q.iter().sum::<f32>();
            let got = code.score(&sign_bits(&v), &magnitude_bits(&v)) + constant;
            let want = reconstructed_dot(&q, &v);
            assert!((got - want).abs() < 1e-4, "{dim}: {got} {want}");
            let signs_only = code.score(&sign_bits(&v), &[]);
            let want: f32 = q
                .iter()
                .zip(&v)
                .map(|(x, y)| if *y > 0.0 { *x } else { 0.0 })
                .sum();
            assert!((signs_only - 2.0 * LOW * want).abs() < 1e-4);
        }
    }

    #[test]
    fn first_step_distances_are_the_four_bit_query_against_the_signs() {
        for dim in [384, 20, 64, 7, 512, 520, 1024] {
            let q = unit(1, dim);
            let code = QueryCode::new(&q);
            let step = q.iter().fold(0f32, |m, x| m.max(x.abs())) / 7.5;
            let vs: Vec<Vec<f32>> = (0..30).map(|s| unit(s, dim)).collect();
            let bits: Vec<u8> = vs.iter().flat_map(|v| sign_bits(v)).collect();
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            code.distances(&bits, &mut fast);
            code.distances_portable(&bits, &mut slow);
            assert_eq!(fast, slow);
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("popcnt") {
                let mut counted = Vec::new();
                unsafe { code.distances_popcnt(&bits, &mut counted) };
                assert_eq!(counted, slow);
            }
            for (v, d) in vs.iter().zip(&fast) {
                let naive: i64 = q
                    .iter()
                    .zip(v)
                    .filter(|(_, y)| **y > 0.0)
                    .map(|(x, _)| 2 * (x / step + 7.5).round().clamp(0.0, 15.0) as i64 - 15)
                    .sum();
                assert_eq!(i64::from(*d), 15 * dim as i64 - naive, "{dim}");
                assert!((*d as usize) < code.distance_range());
            }
            assert!(
                fast[1] < fast[0] && fast[1] < fast[2],
                "the query's own signs are nearest"
            );
        }
    }
}
