//! Proofs as records (`pmm-verify --root/--prove/--consistency` print them, `--check-proof`
//! reads them back) and their offline check against a trusted root or signed checkpoint
//! (docs/verification.md). Hashes are lowercase hex, paths in RFC 9162 order.

use super::merkle::{self, ProofError};
use super::note::Checkpoint;
use super::Digest;
use serde::{Deserialize, Serialize};

/// A hash as 64 hex digits in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hex(pub Digest);

impl Serialize for Hex {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_hex())
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Digest::from_hex(&s)
            .map(Hex)
            .ok_or_else(|| serde::de::Error::custom(format!("not 64 hex digits: {s:?}")))
    }
}

/// One proof record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Proof {
    /// The root of the tree of `size` events.
    Root {
        /// The tree size.
        size: u64,
        /// Its root.
        root: Hex,
    },
    /// Event `id` (leaf `index` = id − 1) is in the tree of `size` events.
    Inclusion {
        /// The event's id.
        id: i64,
        /// Its leaf index.
        index: u64,
        /// The tree size.
        size: u64,
        /// The leaf hash, `SHA-256(0x00 ‖ event hash bytes)`.
        leaf: Hex,
        /// The event's own hash (the leaf's data), when the prover gave it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event_hash: Option<Hex>,
        /// The root of the tree of `size` events.
        root: Hex,
        /// The audit path, the sibling nearest the leaf first.
        path: Vec<Hex>,
    },
    /// The tree of `from` events is a prefix of the tree of `to` events.
    Consistency {
        /// The older size.
        from: u64,
        /// The newer size.
        to: u64,
        /// The older root.
        root_from: Hex,
        /// The newer root.
        root_to: Hex,
        /// The consistency path.
        path: Vec<Hex>,
    },
}

/// What a proof is checked against.
#[derive(Debug, Clone)]
pub enum Trusted {
    /// A root hash the checker trusts (for a tree of unknown size: the proof's).
    Root(Digest),
    /// A checkpoint whose signature has been verified.
    Checkpoint(Checkpoint),
}

/// Why a proof does not check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The proof's own arithmetic fails.
    #[error("{0}")]
    Proof(#[from] ProofError),
    /// The leaf is not the hash of the event hash given with it.
    #[error("the leaf {leaf} is not the leaf of event hash {event_hash}")]
    Leaf {
        /// The proof's leaf.
        leaf: Digest,
        /// The event hash it came with.
        event_hash: Digest,
    },
    /// The proof is about a tree the trusted root or checkpoint does not name.
    #[error("{0}")]
    Untrusted(String),
}

fn trusted_root(trusted: &Trusted, size: u64) -> Result<Option<Digest>, CheckError> {
    match trusted {
        Trusted::Root(r) => Ok(Some(*r)),
        Trusted::Checkpoint(cp) if cp.size == size => Ok(Some(cp.root)),
        Trusted::Checkpoint(_) => Ok(None),
    }
}

/// Checks `proof` on its own (its path recomputes its roots) and against `trusted`: the
/// checkpoint's (or the trusted root's) tree must be the proof's tree — for a consistency
/// proof, either of its two trees. Returns the size of the trusted tree it was tied to when
/// that size was itself checked, that is against a checkpoint (whose size is signed); `None`
/// against a bare root, for which the size is only the proof's own claim.
pub fn check(proof: &Proof, trusted: &Trusted) -> Result<Option<u64>, CheckError> {
    check_tied(proof, trusted).map(|size| match trusted {
        Trusted::Checkpoint(_) => Some(size),
        Trusted::Root(_) => None,
    })
}

fn check_tied(proof: &Proof, trusted: &Trusted) -> Result<u64, CheckError> {
    let untrusted = |what: String| Err(CheckError::Untrusted(what));
    match proof {
        Proof::Root { size, root } => match trusted_root(trusted, *size)? {
            Some(t) if t == root.0 => Ok(*size),
            Some(t) => untrusted(format!("the root {} is not the trusted root {t}", root.0)),
            None => untrusted(format!(
                "the checkpoint is of size {}, the root of size {size}",
                cp_size(trusted)
            )),
        },
        Proof::Inclusion {
            index,
            size,
            leaf,
            event_hash,
            root,
            path,
            id,
        } => {
            if let Some(h) = event_hash {
                if merkle::leaf_hash(&h.0 .0) != leaf.0 {
                    return Err(CheckError::Leaf {
                        leaf: leaf.0,
                        event_hash: h.0,
                    });
                }
            }
            if u64::try_from(*id).ok() != index.checked_add(1) {
                return untrusted(format!("event {id} is not leaf {index}"));
            }
            let path: Vec<Digest> = path.iter().map(|h| h.0).collect();
            merkle::verify_inclusion(*index, *size, &leaf.0, &path, &root.0)?;
            match trusted_root(trusted, *size)? {
                Some(t) if t == root.0 => Ok(*size),
                Some(t) => untrusted(format!("the proof's root {} is not the trusted root {t}", root.0)),
                None => untrusted(format!(
                    "the checkpoint is of size {}, the proof of size {size} (ask for the proof at --size {})",
                    cp_size(trusted),
                    cp_size(trusted)
                )),
            }
        }
        Proof::Consistency {
            from,
            to,
            root_from,
            root_to,
            path,
        } => {
            let path: Vec<Digest> = path.iter().map(|h| h.0).collect();
            merkle::verify_consistency(*from, *to, &root_from.0, &root_to.0, &path)?;
            for (size, root) in [(*from, root_from.0), (*to, root_to.0)] {
                if trusted_root(trusted, size)? == Some(root) {
                    return Ok(size);
                }
            }
            untrusted(match trusted {
                Trusted::Root(r) => format!("neither of the proof's roots is the trusted root {r}"),
                Trusted::Checkpoint(cp) => format!(
                    "the checkpoint (size {}, root {}) is neither of the proof's trees",
                    cp.size, cp.root
                ),
            })
        }
    }
}

fn cp_size(trusted: &Trusted) -> u64 {
    match trusted {
        Trusted::Checkpoint(cp) => cp.size,
        Trusted::Root(_) => 0,
    }
}
