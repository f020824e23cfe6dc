//! A ledger checked against a signed checkpoint (`pmm-verify --checkpoint`, and the witness's
//! `--cosign`, which cosigns only what this check passes): the ledger's tree at the
//! checkpoint's size has the checkpoint's root, and the ledger only grew since.
//!
//! What the check vouches for is recomputed from the events, never read from the stored tree
//! (`pmm_merkle` is a cache a reader cannot trust): one pass over the ledger checks every
//! event's hash against its content and its link to the one before (the chain verifier, so an
//! erased event counts as what it was), and folds the verified hashes into the Merkle roots it
//! compares. An event edited in place — its content changed, its stored hash kept — fails the
//! check; so does a ledger rewritten and re-hashed under a stored tree left as it was. Cost:
//! one chain verification (`pmm-verify`'s), O(n) in the ledger's size.

use crate::chain::merkle;
use crate::chain::note::{Checkpoint, NoteError};
use crate::chain::{Digest, Finding, Verifier};
use crate::interchange::{self, Input, Item};
use serde_json::{Map, Value};

/// What checking a ledger against a checkpoint found.
#[derive(Debug, Clone)]
pub struct LedgerCheck {
    /// The fields of the `checkpoint_check` record: `size`, `root`, `ledger_size`,
    /// `ledger_root`, `root_at_size` (when the ledger is that long), `previous_size`.
    pub record: Map<String, Value>,
    /// Why the ledger does not match the checkpoint (or the previous checkpoint), if it does
    /// not.
    pub problem: Option<Problem>,
}

/// Why a ledger does not match a checkpoint; its text is the record's `error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The ledger is shorter than the checkpoint.
    #[error(
        "the ledger has {ledger_size} events, fewer than the checkpoint's {size}: it was truncated"
    )]
    Truncated {
        /// The ledger's events.
        ledger_size: u64,
        /// The checkpoint's.
        size: u64,
    },
    /// The ledger's first `size` events have another root.
    #[error("the ledger's first {size} events have root {found}, the checkpoint says {signed}: history was rewritten")]
    Rewritten {
        /// The checkpoint's size.
        size: u64,
        /// The root of the ledger's first `size` events.
        found: Digest,
        /// The checkpoint's root.
        signed: Digest,
    },
    /// The events do not verify: the stored hashes are not the history they stand for.
    #[error("the ledger does not verify ({first}; {findings} finding(s), run pmm-verify): its events are not the history the checkpoint signs")]
    DoesNotVerify {
        /// The first finding, in words.
        first: String,
        /// How many findings.
        findings: u64,
    },
    /// `--previous` did not open with the key.
    #[error("the previous checkpoint: {0}")]
    PreviousUnopened(String),
    /// The checkpoint is smaller than the previous one.
    #[error("the checkpoint has {size} events, fewer than the previous one's {previous}: the log went back")]
    WentBack {
        /// The checkpoint's size.
        size: u64,
        /// The previous checkpoint's.
        previous: u64,
    },
    /// The checkpoint's tree does not extend the previous one's.
    #[error("the checkpoint is not consistent with the previous one: the tree of its first {size} events has root {}, the previous checkpoint says {signed}", found.map_or_else(|| "none".into(), |r| r.to_hex()))]
    Inconsistent {
        /// The previous checkpoint's size.
        size: u64,
        /// The root of the first `size` events, if the ledger has them.
        found: Option<Digest>,
        /// The previous checkpoint's root.
        signed: Digest,
    },
    /// `--witness`: the checkpoint carries no valid cosignature by that witness.
    #[error("no valid cosignature by the witness: {0}")]
    NoCosignature(String),
}

/// What one pass over the ledger found: the roots at the sizes asked for, and the chain's
/// verdict.
struct Pass {
    roots: Roots,
    ok: bool,
    first: Option<Finding>,
    findings: u64,
}

/// The roots of the first `size` leaves for a few sizes, folded as leaves go by (the compact
/// range of RFC 9162's log: one perfect subtree per set bit of the size).
struct Roots {
    size: u64,
    pending: Vec<Digest>,
    wanted: Vec<(u64, Option<Digest>)>,
}

impl Roots {
    fn new(wanted: &[u64]) -> Roots {
        Roots {
            size: 0,
            pending: vec![Digest([0; 32]); 64],
            wanted: wanted.iter().map(|s| (*s, None)).collect(),
        }
    }

    fn root(&self) -> Digest {
        let mut acc: Option<Digest> = None;
        for level in 0..64 {
            if self.size >> level & 1 == 1 {
                let node = self.pending[level];
                acc = Some(match acc {
                    None => node,
                    Some(right) => merkle::node_hash(&node, &right),
                });
            }
        }
        acc.unwrap_or_else(merkle::empty_root)
    }

    fn note(&mut self) {
        if self
            .wanted
            .iter()
            .any(|(s, r)| *s == self.size && r.is_none())
        {
            let root = self.root();
            for (s, r) in &mut self.wanted {
                if *s == self.size {
                    *r = Some(root);
                }
            }
        }
    }

    fn push(&mut self, leaf: Digest) {
        self.note();
        let (mut h, mut level, mut idx) = (leaf, 0usize, self.size);
        while idx & 1 == 1 {
            h = merkle::node_hash(&self.pending[level], &h);
            idx >>= 1;
            level += 1;
        }
        self.pending[level] = h;
        self.size += 1;
    }

    fn at(&self, size: u64) -> Option<Digest> {
        self.wanted
            .iter()
            .find(|(s, _)| *s == size)
            .and_then(|(_, r)| *r)
    }
}

/// The first finding of a chain verification, in words.
fn in_words(f: &Finding) -> String {
    let what = serde_json::to_value(&f.problem)
        .ok()
        .and_then(|v| v.get("problem")?.as_str().map(str::to_string))
        .unwrap_or_else(|| "a problem".into());
    match f.id {
        Some(id) => format!("event {id}: {what}"),
        None => what,
    }
}

/// One pass over `input`: each event's hash and link checked by the chain verifier, each
/// stored hash folded into the roots of the first `sizes` events.
fn pass(input: &Input, sizes: &[u64]) -> crate::Result<Pass> {
    let mut roots = Roots::new(sizes);
    let mut v = Verifier::new(Vec::new());
    let mut found: Vec<Finding> = Vec::new();
    let (mut first, mut findings): (Option<Finding>, u64) = (None, 0);
    let mut keep = |found: &mut Vec<Finding>| {
        for f in found.drain(..) {
            if f.record == "finding" {
                findings += 1;
                first.get_or_insert(f);
            }
        }
    };
    interchange::read_with(input, &|_| {}, &interchange::digest, &mut |item, d| {
        match (item, d) {
            (Item::Event(r), d) => {
                match d {
                    Some(d) => v.check_computed(&r.event, d, &mut found),
                    None => v.check(&r.event, r.meta.as_ref(), &mut found),
                }
                roots.push(merkle::event_leaf(r.event.hash.as_deref()));
            }
            (Item::Malformed { line, id, error }, _) => v.malformed(id, line, error, &mut found),
        }
        keep(&mut found);
        Ok(true)
    })?;
    roots.note();
    // Broken links are findings wherever they point: no second pass is needed to know that.
    if let Some(second) = v.second_pass() {
        v.settle(second, &mut found);
    }
    let summary = v.finish(&mut found);
    keep(&mut found);
    Ok(Pass {
        roots,
        ok: summary.ok,
        first,
        findings,
    })
}

/// Checks the ledger `input` against checkpoint `cp` (its signature already checked) and,
/// with `previous`, that `cp` is a consistent successor of the checkpoint last checked or
/// cosigned (`Err`: that one did not open). See the module docs.
pub fn check(
    input: &Input,
    cp: &Checkpoint,
    previous: Option<&Result<Checkpoint, NoteError>>,
) -> crate::Result<LedgerCheck> {
    let prev_size = previous.and_then(|p| p.as_ref().ok()).map(|p| p.size);
    let sizes: Vec<u64> = [Some(cp.size), prev_size].into_iter().flatten().collect();
    let pass = pass(input, &sizes)?;
    let ledger_size = pass.roots.size;
    let ledger_root = pass.roots.root();
    let mut record = Map::new();
    record.insert("size".into(), cp.size.into());
    record.insert("root".into(), cp.root.to_hex().into());
    record.insert("ledger_size".into(), ledger_size.into());
    record.insert("ledger_root".into(), ledger_root.to_hex().into());
    let mut problem = if cp.size > ledger_size {
        Some(Problem::Truncated {
            ledger_size,
            size: cp.size,
        })
    } else {
        let root = pass.roots.at(cp.size).unwrap_or(ledger_root);
        record.insert("root_at_size".into(), root.to_hex().into());
        (root != cp.root).then_some(Problem::Rewritten {
            size: cp.size,
            found: root,
            signed: cp.root,
        })
    };
    if problem.is_none() && !pass.ok {
        // The roots are of the stored hashes; an event whose content no longer gives its hash
        // (edited in place), or a link or id out of place, means the ledger is not the history
        // those hashes stand for.
        problem = Some(Problem::DoesNotVerify {
            first: pass
                .first
                .as_ref()
                .map_or_else(|| "a problem".to_string(), in_words),
            findings: pass.findings,
        });
    }
    if let (None, Some(prev)) = (&problem, previous) {
        problem = previous_problem(cp, prev, &pass.roots, &mut record);
    }
    Ok(LedgerCheck { record, problem })
}

/// Whether `cp` is a consistent successor of `previous`, on a ledger whose first `cp.size`
/// events have `cp`'s root (so its first `previous.size` events are the only tree of that size
/// `cp` extends).
fn previous_problem(
    cp: &Checkpoint,
    previous: &Result<Checkpoint, NoteError>,
    roots: &Roots,
    record: &mut Map<String, Value>,
) -> Option<Problem> {
    let p = match previous {
        Err(err) => return Some(Problem::PreviousUnopened(err.to_string())),
        Ok(p) => p,
    };
    record.insert("previous_size".into(), p.size.into());
    if p.size > cp.size {
        Some(Problem::WentBack {
            size: cp.size,
            previous: p.size,
        })
    } else if roots.at(p.size) != Some(p.root) {
        Some(Problem::Inconsistent {
            size: p.size,
            found: roots.at(p.size),
            signed: p.root,
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::merkle::MemTree;

    #[test]
    fn folded_roots_equal_the_tree_of_every_size() {
        let leaves: Vec<Digest> = (0..70u8).map(|i| merkle::leaf_hash(&[i])).collect();
        let sizes: Vec<u64> = (0..=70).collect();
        let mut roots = Roots::new(&sizes);
        for l in &leaves {
            roots.push(*l);
        }
        roots.note();
        let mut tree = MemTree::new(&leaves);
        for n in sizes {
            let want = merkle::root(&mut tree, n).unwrap();
            assert_eq!(roots.at(n), Some(want), "size {n}");
        }
    }
}
