//! The Merkle tree over the ledger (SPEC §2.6, docs/verification.md): RFC 9162 hashing, one
//! leaf per event in id order (leaf index = id − 1), the leaf's data the 32 raw bytes of the
//! event's hash. Pure functions: proofs are built from a [`Nodes`] source of *perfect
//! subtree* hashes (the store keeps them, `store/sqlite/merkle.rs`; tests keep them in memory) and
//! checked with nothing but the proof, so any RFC 9162 verifier checks pmm's proofs and pmm
//! checks theirs.
//!
//! A perfect subtree is named by `(level, index)`: the `2^level` leaves starting at leaf
//! `index · 2^level`. Every hash a root or a proof needs is a perfect subtree's or a fold of
//! a few of them, so a proof is O(log n) reads.

use super::Digest;
use sha2::{Digest as _, Sha256};

/// The leaf hash of leaf data `d`: `SHA-256(0x00 ‖ d)`.
pub fn leaf_hash(d: &[u8]) -> Digest {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(d);
    Digest(h.finalize().into())
}

/// An interior node's hash: `SHA-256(0x01 ‖ l ‖ r)`.
pub fn node_hash(l: &Digest, r: &Digest) -> Digest {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(l.0);
    h.update(r.0);
    Digest(h.finalize().into())
}

/// The root of the empty tree: `SHA-256()` (RFC 9162 §2.1.1).
pub fn empty_root() -> Digest {
    Digest::of(b"")
}

/// The leaf of an event, from its stored hash: `leaf_hash` of the 32 bytes its 64 hex digits
/// spell. An event without a well-formed hash (NULL, or not 64 hex digits: only a damaged or
/// foreign ledger has one) gets the leaf of empty data, `SHA-256(0x00)`, so the tree is
/// still defined over every event; such an event can never be proved (see
/// [`event_leaf_data`]) and verification reports it anyway.
pub fn event_leaf(hash: Option<&str>) -> Digest {
    match event_leaf_data(hash) {
        Some(d) => leaf_hash(&d.0),
        None => leaf_hash(b""),
    }
}

/// The leaf data of an event: the raw bytes of its hash, `None` when it has no well-formed
/// hash.
pub fn event_leaf_data(hash: Option<&str>) -> Option<Digest> {
    hash.and_then(Digest::from_hex)
}

/// A source of perfect-subtree hashes.
pub trait Nodes {
    /// The error a read can fail with.
    type Error;
    /// The hash of the perfect subtree of `2^level` leaves starting at leaf
    /// `index << level`. Only asked for subtrees inside the tree the caller proves about.
    fn node(&mut self, level: u32, index: u64) -> Result<Digest, Self::Error>;
}

/// The largest power of two strictly less than `n` (`n ≥ 2`).
fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1u64 << (63 - (n - 1).leading_zeros())
}

/// MTH of the leaves `[lo, hi)`, where the range is one the RFC's recursion produces (`lo` a
/// multiple of the largest power of two ≤ `hi − lo`): the fold of its perfect subtrees,
/// largest first. At most log₂(hi − lo) + 1 reads.
pub fn subtree<N: Nodes>(nodes: &mut N, lo: u64, hi: u64) -> Result<Digest, N::Error> {
    if hi <= lo {
        return Ok(empty_root());
    }
    let mut parts = Vec::new();
    let mut at = lo;
    while at < hi {
        let rest = hi - at;
        let level = 63 - rest.leading_zeros();
        parts.push(nodes.node(level, at >> level)?);
        at += 1u64 << level;
    }
    let mut acc = parts.pop().unwrap_or_else(empty_root);
    while let Some(l) = parts.pop() {
        acc = node_hash(&l, &acc);
    }
    Ok(acc)
}

/// The root of the tree of the first `size` leaves.
pub fn root<N: Nodes>(nodes: &mut N, size: u64) -> Result<Digest, N::Error> {
    subtree(nodes, 0, size)
}

/// The inclusion proof of leaf `index` in the tree of `size` leaves, in RFC 9162 order
/// (§2.1.3.1: the sibling nearest the leaf first). `index < size`.
pub fn inclusion_proof<N: Nodes>(
    nodes: &mut N,
    index: u64,
    size: u64,
) -> Result<Vec<Digest>, N::Error> {
    let mut path = Vec::new();
    let (mut lo, mut hi) = (0u64, size);
    // Walk down from the root, collecting siblings root-first, then reverse.
    while hi - lo > 1 {
        let k = split(hi - lo);
        if index < lo + k {
            path.push(subtree(nodes, lo + k, hi)?);
            hi = lo + k;
        } else {
            path.push(nodes_perfect(nodes, lo, k)?);
            lo += k;
        }
    }
    path.reverse();
    Ok(path)
}

fn nodes_perfect<N: Nodes>(nodes: &mut N, lo: u64, k: u64) -> Result<Digest, N::Error> {
    let level = k.trailing_zeros();
    nodes.node(level, lo >> level)
}

/// The consistency proof between the trees of `from` and `to` leaves, in RFC 9162 order
/// (§2.1.4.1). Empty when `from` is 0 or equals `to`. `from ≤ to`.
pub fn consistency_proof<N: Nodes>(
    nodes: &mut N,
    from: u64,
    to: u64,
) -> Result<Vec<Digest>, N::Error> {
    if from == 0 || from >= to {
        return Ok(Vec::new());
    }
    // SUBPROOF(m, D[lo:hi], b), unrolled: siblings are collected root-first, then reversed.
    let (m, mut lo, mut hi, mut b) = (from, 0u64, to, true);
    let mut path = Vec::new();
    loop {
        let n = hi - lo;
        let m_rel = m - lo;
        if m_rel == n {
            if !b {
                path.push(subtree(nodes, lo, hi)?);
            }
            break;
        }
        let k = split(n);
        if m_rel <= k {
            path.push(subtree(nodes, lo + k, hi)?);
            hi = lo + k;
        } else {
            path.push(nodes_perfect(nodes, lo, k)?);
            lo += k;
            b = false;
        }
    }
    path.reverse();
    Ok(path)
}

/// Why a proof does not check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The index is not inside the tree.
    #[error("leaf index {index} is not inside a tree of size {size}")]
    OutOfRange {
        /// The leaf index.
        index: u64,
        /// The tree size.
        size: u64,
    },
    /// The sizes are out of order.
    #[error("a tree of size {from} cannot grow into one of size {to}")]
    Sizes {
        /// The older size.
        from: u64,
        /// The newer size.
        to: u64,
    },
    /// The path has the wrong number of hashes for its sizes.
    #[error("the proof has {got} hashes where {want} belong")]
    Length {
        /// How many the proof has.
        got: usize,
        /// How many the sizes call for.
        want: usize,
    },
    /// The path recomputes another root.
    #[error("the proof recomputes root {computed}, not {expected}")]
    Root {
        /// What the proof computes.
        computed: Digest,
        /// The root it should have reached.
        expected: Digest,
    },
    /// The consistency proof's old root differs.
    #[error("the proof recomputes old root {computed}, not {expected}")]
    OldRoot {
        /// What the proof computes.
        computed: Digest,
        /// The old root it should have reached.
        expected: Digest,
    },
}

/// The root an inclusion proof reaches (RFC 9162 §2.1.3.2).
pub fn root_from_inclusion(
    index: u64,
    size: u64,
    leaf: &Digest,
    path: &[Digest],
) -> Result<Digest, ProofError> {
    if index >= size {
        return Err(ProofError::OutOfRange { index, size });
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf;
    for p in path {
        if sn == 0 {
            return Err(ProofError::Length {
                got: path.len(),
                want: inclusion_len(index, size),
            });
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(ProofError::Length {
            got: path.len(),
            want: inclusion_len(index, size),
        });
    }
    Ok(r)
}

fn inclusion_len(index: u64, size: u64) -> usize {
    let (mut lo, mut hi, mut n) = (0u64, size, 0usize);
    while hi - lo > 1 {
        let k = split(hi - lo);
        if index < lo + k {
            hi = lo + k;
        } else {
            lo += k;
        }
        n += 1;
    }
    n
}

/// Checks an inclusion proof against a root.
pub fn verify_inclusion(
    index: u64,
    size: u64,
    leaf: &Digest,
    path: &[Digest],
    root: &Digest,
) -> Result<(), ProofError> {
    let computed = root_from_inclusion(index, size, leaf, path)?;
    if computed != *root {
        return Err(ProofError::Root {
            computed,
            expected: *root,
        });
    }
    Ok(())
}

/// Checks a consistency proof between two roots (RFC 9162 §2.1.4.2).
pub fn verify_consistency(
    from: u64,
    to: u64,
    root_from: &Digest,
    root_to: &Digest,
    path: &[Digest],
) -> Result<(), ProofError> {
    if from > to {
        return Err(ProofError::Sizes { from, to });
    }
    if from == to || from == 0 {
        if !path.is_empty() {
            return Err(ProofError::Length {
                got: path.len(),
                want: 0,
            });
        }
        if from == to && root_from != root_to {
            return Err(ProofError::Root {
                computed: *root_from,
                expected: *root_to,
            });
        }
        return Ok(());
    }
    let mut path: Vec<Digest> = path.to_vec();
    if from.is_power_of_two() {
        path.insert(0, *root_from);
    }
    let Some((first, rest)) = path.split_first() else {
        return Err(ProofError::Length { got: 0, want: 1 });
    };
    let (mut fn_, mut sn) = (from - 1, to - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if sn == 0 {
            return Err(ProofError::Length {
                got: path.len(),
                want: path.len() - 1,
            });
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(ProofError::Length {
            got: path.len(),
            want: path.len() + 1,
        });
    }
    if fr != *root_from {
        return Err(ProofError::OldRoot {
            computed: fr,
            expected: *root_from,
        });
    }
    if sr != *root_to {
        return Err(ProofError::Root {
            computed: sr,
            expected: *root_to,
        });
    }
    Ok(())
}

/// Perfect-subtree hashes in memory, built from leaves: for tests, fixtures and small trees.
#[derive(Debug, Default, Clone)]
pub struct MemTree {
    /// `levels[l][i]`: the perfect subtree `(l, i)`.
    pub levels: Vec<Vec<Digest>>,
}

impl MemTree {
    /// A tree over these leaf hashes.
    pub fn new(leaves: &[Digest]) -> MemTree {
        let mut t = MemTree::default();
        for l in leaves {
            t.push(*l);
        }
        t
    }

    /// How many leaves it holds.
    pub fn size(&self) -> u64 {
        self.levels.first().map_or(0, |l| l.len() as u64)
    }

    /// Appends a leaf hash and every perfect subtree it completes.
    pub fn push(&mut self, leaf: Digest) {
        let mut level = 0usize;
        let mut h = leaf;
        loop {
            if self.levels.len() == level {
                self.levels.push(Vec::new());
            }
            self.levels[level].push(h);
            let i = self.levels[level].len() - 1;
            if i.is_multiple_of(2) {
                break;
            }
            h = node_hash(&self.levels[level][i - 1], &h);
            level += 1;
        }
    }
}

impl Nodes for MemTree {
    type Error = std::convert::Infallible;
    fn node(&mut self, level: u32, index: u64) -> Result<Digest, Self::Error> {
        Ok(self.levels[level as usize][index as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MTH straight from RFC 9162 §2.1.1, recursively over the leaf hashes.
    fn mth(leaves: &[Digest]) -> Digest {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = split(n as u64) as usize;
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    fn leaves(n: usize) -> Vec<Digest> {
        (0..n)
            .map(|i| leaf_hash(&(i as u64).to_be_bytes()))
            .collect()
    }

    #[test]
    fn roots_match_the_rfc_recursion() {
        let all = leaves(70);
        let mut t = MemTree::new(&all);
        for n in 0..=70 {
            assert_eq!(root(&mut t, n as u64).unwrap(), mth(&all[..n]), "size {n}");
        }
    }

    #[test]
    fn every_proof_of_small_trees_verifies() {
        let all = leaves(40);
        let mut t = MemTree::new(&all);
        for n in 1..=40u64 {
            let r = root(&mut t, n).unwrap();
            for i in 0..n {
                let p = inclusion_proof(&mut t, i, n).unwrap();
                assert_eq!(p.len(), inclusion_len(i, n));
                verify_inclusion(i, n, &all[i as usize], &p, &r).unwrap();
            }
            for m in 0..=n {
                let rm = root(&mut t, m).unwrap();
                let p = consistency_proof(&mut t, m, n).unwrap();
                verify_consistency(m, n, &rm, &r, &p).unwrap_or_else(|e| panic!("{m}->{n}: {e}"));
            }
        }
    }

    /// RFC 9162's example of seven leaves (§2.1.5): the proof for leaf d (index 3) is
    /// [c, g, l], and the consistency proof 3 → 7 is [c, d, g, l].
    #[test]
    fn the_rfc_example_tree() {
        let all = leaves(7);
        let mut t = MemTree::new(&all);
        let (c, d) = (all[2], all[3]);
        let g = node_hash(&all[0], &all[1]);
        let h = node_hash(&c, &d);
        let _k = node_hash(&g, &h);
        let i = node_hash(&all[4], &all[5]);
        let j = all[6];
        let l = node_hash(&i, &j);
        assert_eq!(inclusion_proof(&mut t, 3, 7).unwrap(), vec![c, g, l]);
        assert_eq!(consistency_proof(&mut t, 3, 7).unwrap(), vec![c, d, g, l]);
        assert_eq!(consistency_proof(&mut t, 4, 7).unwrap(), vec![l]);
        assert_eq!(
            consistency_proof(&mut t, 6, 7).unwrap(),
            vec![i, j, node_hash(&g, &h)]
        );
    }

    #[test]
    fn the_leaf_of_an_event_without_a_hash_is_the_empty_leaf() {
        assert_eq!(event_leaf(None), leaf_hash(b""));
        assert_eq!(event_leaf(Some("zz")), leaf_hash(b""));
        let h = Digest::of(b"x");
        assert_eq!(event_leaf(Some(&h.to_hex())), leaf_hash(&h.0));
    }
}
