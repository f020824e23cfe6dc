//! The nearest-neighbour engine of recall's meaning source, as pure code: the codes a search
//! ranks by before it reads any vector whole (`codes`: a stored vector's sign and magnitude
//! bits, its half floats; a query's 4-bit planes and sum tables) and the first two steps of a
//! search over pack rows ([`Nearest`]). No I/O: the store keeps the bytes (the vectors, the
//! pack rows, the cache of rows in memory) and feeds them in; docs/recall.md has the figures.

pub mod codes;
mod nearest;

pub use codes::{
    dequantize, dot_quantized, magnitude_bits, quantize, sign_bits, QueryCode, HIGH, LOW,
    MAGNITUDE_SPLIT,
};
pub use nearest::{
    best_exact, candidates, merged, nearest_in_memory, Limits, Nearest, PackCodes, CANDIDATES,
    CHUNK, EXACT_SHARE, LIMITS, MIN_CANDIDATES, PREFILTER,
};
