//! The `hash64` embedding (FORMATS.md §9.2): a deterministic bag-of-tokens projection that
//! needs no model and gives the same vector on every machine, so that the `embedding_add`
//! events of a ledger can be recomputed — and checked — byte for byte.
//!
//! Every numeric step follows the reference (retrieval/vector.py) exactly, because the stored
//! int8 vector and the 9-decimal scale expose any difference in the last bits:
//! - tokens are Python's `str.split()` (Python's white space, which includes U+001C..U+001F);
//! - token component `i` is the first 4 bytes of `sha256("<token>:<i>")` as a big-endian u32
//!   `n`, mapped to `(n / 2^32) * 2.0 - 1.0`;
//! - components are summed over tokens in order, the norm is `sqrt` of the squares summed in
//!   index order, each component divided by it;
//! - int8: `scale = max|x| / 127`, `q = clamp(round_half_even(x / scale), -128, 127)`;
//! - the stored scale is `float(f"{scale:.9f}")` printed with Python's float `repr`.

use crate::canon;
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;

/// The model name the reference writes for this embedding.
pub const MODEL: &str = "hash64";

/// The default number of dimensions (the reference's retrieval config).
pub const DEFAULT_DIMS: usize = 64;

/// The fewest dimensions the reference's embedder will use (`max(8, dims)`).
pub const MIN_DIMS: usize = 8;

/// Python's `str.isspace`: Unicode white space plus U+001C..U+001F, which Rust's
/// `char::is_whitespace` leaves out.
/// Python's `text.split()` with no argument (see [`crate::pystr::split`]).
pub use crate::pystr::split as py_split;

/// The pseudo-random vector of `token`: one sha256 per component, as the reference does.
fn token_vector(token: &str, dims: usize) -> Vec<f64> {
    let mut prefix = Sha256::new();
    prefix.update(token.as_bytes());
    prefix.update(b":");
    let mut digits = [0u8; 20];
    (0..dims)
        .map(|i| {
            let mut h = prefix.clone();
            h.update(write_usize(&mut digits, i));
            let d = h.finalize();
            let n = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
            (n as f64 / 4_294_967_296.0) * 2.0 - 1.0
        })
        .collect()
}

/// The decimal digits of `n` in `buf`, without allocating.
fn write_usize(buf: &mut [u8; 20], mut n: usize) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// The normalised `hash64` vector of `text` with `max(8, dims)` components. No tokens, or a
/// zero sum, give the zero vector.
pub fn hash64(text: &str, dims: usize) -> Vec<f64> {
    let dims = dims.max(MIN_DIMS);
    // Texts repeat their words, and so do the many events a verifier re-embeds: each distinct
    // token is hashed once per thread while the cache lasts (the sum is still taken token by
    // token, in order, so the floating-point result is the same bit for bit).
    TOKEN_VECTORS.with(|cell| {
        let mut guard = cell.borrow_mut();
        let (cached_dims, cache) = &mut *guard;
        if *cached_dims != dims || cache.len() > TOKEN_CACHE_MAX {
            cache.clear();
            *cached_dims = dims;
        }
        aggregate(text, dims, cache)
    })
}

/// How many token vectors a thread keeps (64 dimensions: 8 MiB at most); past it the cache
/// starts over.
const TOKEN_CACHE_MAX: usize = 16_384;

thread_local! {
    /// Token vectors of one dimension count, shared by every [`hash64`] call on the thread.
    static TOKEN_VECTORS: std::cell::RefCell<(usize, HashMap<String, Vec<f64>>)> =
        std::cell::RefCell::new((0, HashMap::new()));
}

fn aggregate(text: &str, dims: usize, cache: &mut HashMap<String, Vec<f64>>) -> Vec<f64> {
    let mut agg = vec![0.0f64; dims];
    let mut any = false;
    for tok in py_split(text) {
        any = true;
        // One look-up for a known token (most of them); a new one is hashed and kept.
        let v = match cache.get(tok) {
            Some(v) => v,
            None => cache
                .entry(tok.to_string())
                .or_insert(token_vector(tok, dims)),
        };
        for (slot, x) in agg.iter_mut().zip(v.iter()) {
            *slot += x;
        }
    }
    if !any {
        return agg;
    }
    let mut sum = 0.0f64;
    for x in &agg {
        sum += x * x;
    }
    let norm = sum.sqrt();
    if norm == 0.0 {
        return vec![0.0; dims];
    }
    agg.iter().map(|x| x / norm).collect()
}

/// [`hash64`] for many texts: token vectors are kept across calls, so a retrieval that scores
/// a hundred messages hashes each distinct word once (64 sha256 digests a word), not once per
/// message. Gives exactly [`hash64`]'s vectors.
#[derive(Debug, Default)]
pub struct Hash64 {
    dims: usize,
    cache: HashMap<String, Vec<f64>>,
}

impl Hash64 {
    /// An embedder with `max(8, dims)` components.
    pub fn new(dims: usize) -> Self {
        Hash64 {
            dims: dims.max(MIN_DIMS),
            cache: HashMap::new(),
        }
    }

    /// `hash64(text, dims)`.
    pub fn vector(&mut self, text: &str) -> Vec<f64> {
        aggregate(text, self.dims, &mut self.cache)
    }
}

/// int8 quantisation: the components scaled so that the largest magnitude becomes ±127,
/// rounded half to even and clamped to [-128, 127], with the scale that maps them back
/// (`x ≈ q * scale`). The zero vector gives zeros and scale 1.0.
pub fn quantize(v: &[f64]) -> (Vec<i64>, f64) {
    let max_abs = v
        .iter()
        .fold(0.0f64, |m, x| if x.abs() > m { x.abs() } else { m });
    if max_abs == 0.0 {
        return (vec![0; v.len()], 1.0);
    }
    let scale = max_abs / 127.0;
    let q = v
        .iter()
        .map(|x| (x / scale).round_ties_even().clamp(-128.0, 127.0) as i64)
        .collect();
    (q, scale)
}

/// The scale as stored: `float(f"{scale:.9f}")` — rounded to 9 decimals from its exact binary
/// value (Rust's fixed-precision formatting rounds the same way as CPython's), then read back.
pub fn stored_scale(scale: f64) -> f64 {
    format!("{scale:.9}").parse().unwrap_or(scale)
}

/// The exact `content` text of the `embedding_add` the reference writes for event `event_id`
/// whose content is `text`: canonical JSON of
/// `{"dims","event_id","model","quant":"int8","scale","text_hash","vector"}`. `dims` is stored
/// as given, while the vector has `max(8, dims)` components; `model` is only a label (the
/// reference embeds with plain `hash64` whatever it says).
pub fn embedding_content(event_id: i64, text: &str, model: &str, dims: i64) -> String {
    let n = usize::try_from(dims).unwrap_or(0);
    let (q, scale) = quantize(&hash64(text, n));
    let mut out = Vec::with_capacity(96 + 5 * q.len());
    out.extend_from_slice(b"{\"dims\":");
    out.extend_from_slice(dims.to_string().as_bytes());
    out.extend_from_slice(b",\"event_id\":");
    out.extend_from_slice(event_id.to_string().as_bytes());
    out.extend_from_slice(b",\"model\":");
    canon::write_str(&mut out, model);
    out.extend_from_slice(b",\"quant\":\"int8\",\"scale\":");
    out.extend_from_slice(canon::float_repr(stored_scale(scale)).as_bytes());
    out.extend_from_slice(b",\"text_hash\":\"");
    out.extend_from_slice(format!("{:x}", Sha256::digest(text.as_bytes())).as_bytes());
    out.extend_from_slice(b"\",\"vector\":[");
    for (i, x) in q.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(x.to_string().as_bytes());
    }
    out.extend_from_slice(b"]}");
    // Canonical JSON is ASCII.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPT-5.1 ledger id 92 (a user message) and its embedding, id 93 (FORMATS.md §2.1).
    const TEXT_92: &str = "My name is Scott. I'm the creator of the Persistent Mind Model. \
                           I'm here to run some tests on you today. ";
    const CONTENT_93: &str = "{\"dims\":64,\"event_id\":92,\"model\":\"hash64\",\"quant\":\"int8\",\
        \"scale\":0.002535373,\"text_hash\":\"ec62f8698cd8f7f4ec0b87d9ace42f0f050d795bd22baea5f9eae843ea90f314\",\
        \"vector\":[37,-55,51,37,-1,13,41,-18,83,74,30,-61,50,2,-60,1,127,27,72,60,74,34,-53,27,-43,\
        23,24,91,-3,66,-49,38,-32,-1,-23,-40,-62,-68,87,26,-73,15,-6,84,-16,85,-74,-42,34,-30,-21,\
        32,8,15,-27,17,107,0,-45,-30,3,9,-17,11]}";

    #[test]
    fn the_caching_embedder_gives_the_same_vectors() {
        let mut e = Hash64::new(64);
        for t in [TEXT_92, "a b a", "", "b a b a c"] {
            assert_eq!(e.vector(t), hash64(t, 64));
        }
    }

    #[test]
    fn reproduces_the_ledger_embedding_with_scale_0_002535373() {
        assert_eq!(embedding_content(92, TEXT_92, MODEL, 64), CONTENT_93);
        let v = hash64(TEXT_92, 64);
        let (q, scale) = quantize(&v);
        assert_eq!(canon::float_repr(stored_scale(scale)), "0.002535373");
        assert_eq!(q[16], 127);
        let norm: f64 = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-12);
    }

    #[test]
    fn token_vector_is_the_documented_formula() {
        let v = token_vector("Scott.", 12);
        for (i, x) in v.iter().enumerate() {
            let d = Sha256::digest(format!("Scott.:{i}").as_bytes());
            let n = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as f64;
            assert_eq!(*x, (n / 2f64.powi(32)) * 2.0 - 1.0);
        }
        let mut buf = [0u8; 20];
        assert_eq!(write_usize(&mut buf, 0), b"0");
        assert_eq!(write_usize(&mut buf, 63), b"63");
        assert_eq!(
            write_usize(&mut buf, usize::MAX),
            usize::MAX.to_string().as_bytes()
        );
    }

    #[test]
    fn python_split_semantics() {
        let toks: Vec<&str> = py_split(" a\x1cb\u{3000}c\n\td\u{85}").collect();
        assert_eq!(toks, ["a", "b", "c", "d"]);
        assert_eq!(py_split("  ").count(), 0);
        // Punctuation and case are kept; U+200B is not white space in Python.
        assert_eq!(
            py_split("A, a\u{200b}b").collect::<Vec<_>>(),
            ["A,", "a\u{200b}b"]
        );
    }

    #[test]
    fn empty_text_and_small_dims() {
        assert_eq!(hash64("", 64), vec![0.0; 64]);
        assert_eq!(hash64(" \n", 4).len(), 8);
        assert_eq!(quantize(&[0.0, 0.0]), (vec![0, 0], 1.0));
        let c = embedding_content(7, "", "hash64", 4);
        assert!(
            c.starts_with(
                "{\"dims\":4,\"event_id\":7,\"model\":\"hash64\",\"quant\":\"int8\",\"scale\":1.0,"
            ),
            "{c}"
        );
        assert!(c.ends_with("\"vector\":[0,0,0,0,0,0,0,0]}"), "{c}");
    }

    #[test]
    fn quantisation_rounds_half_to_even_and_clamps() {
        // max 127 → scale 1.0 exactly; 0.5 → 0, 1.5 → 2, 2.5 → 2, -0.5 → 0.
        let (q, scale) = quantize(&[127.0, 0.5, 1.5, 2.5, -0.5, -127.0]);
        assert_eq!(scale, 1.0);
        assert_eq!(q, vec![127, 0, 2, 2, 0, -127]);
        assert_eq!(stored_scale(0.0025353731234), 0.002535373);
        assert_eq!(stored_scale(1.0 / 127.0), 0.007874016);
    }
}
