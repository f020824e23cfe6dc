//! Inclusion proofs of single events, as `pmm-verify --prove` prints them and the MCP server's
//! `prove` tool returns them: the library half, so that both give the same record.

use crate::chain::merkle;
use crate::chain::note::{Checkpoint, SignerKey};
use crate::chain::proof::{Hex, Proof};
use crate::store::{Ledger, Reads, Tree};
use crate::Error;

/// The tree size asked for: `size`, at most the ledger's (`flag` names the argument in the
/// error).
pub fn tree_size(tree: &Tree<'_>, size: Option<u64>, flag: &str) -> crate::Result<u64> {
    let n = size.unwrap_or(tree.size());
    if n > tree.size() {
        return Err(Error::bad_input(
            Some(flag.into()),
            format!("the ledger has {} events, not {n}", tree.size()),
        ));
    }
    Ok(n)
}

/// The RFC 9162 inclusion proof of event `id` in the ledger's tree of `size` events (default:
/// all of them). [`Error::NotFound`] when the event is not a leaf of that tree or has no
/// well-formed hash.
pub fn inclusion(ledger: &Ledger, id: i64, size: Option<u64>, flag: &str) -> crate::Result<Proof> {
    let mut tree = ledger.tree()?;
    let e = |e| ledger.err(e);
    let size = tree_size(&tree, size, flag)?;
    let index = id.checked_sub(1).and_then(|i| u64::try_from(i).ok());
    let Some(index) = index.filter(|i| *i < size) else {
        return Err(Error::NotFound(format!(
            "event {id} is not in the tree of {size} events"
        )));
    };
    let Some(stored) = tree.event_hash(id).map_err(e)? else {
        return Err(Error::NotFound(format!("no event {id}")));
    };
    let Some(data) = merkle::event_leaf_data(stored.as_deref()) else {
        return Err(Error::NotFound(format!(
            "event {id} has no well-formed hash: it cannot be proved (run pmm-verify)"
        )));
    };
    let leaf = merkle::leaf_hash(&data.0);
    let at_index = merkle::subtree(&mut tree, index, index + 1).map_err(e)?;
    if at_index != leaf {
        return Err(Error::NotFound(format!(
            "event {id} is not leaf {index} of the tree (its ids do not rise by one from 1: run pmm-verify)"
        )));
    }
    let path = merkle::inclusion_proof(&mut tree, index, size).map_err(e)?;
    let root = merkle::root(&mut tree, size).map_err(e)?;
    Ok(Proof::Inclusion {
        id,
        index,
        size,
        leaf: Hex(leaf),
        event_hash: Some(Hex(data)),
        root: Hex(root),
        path: path.iter().map(|d| Hex(*d)).collect(),
    })
}

/// The signed checkpoint (C2SP tlog-checkpoint in a signed note) of the ledger's tree as it is
/// now, signed with `signer` (`pmm-export --checkpoint`, `pmm-tick --checkpoint-key`): the
/// note and the tree size.
pub fn signed_checkpoint(ledger: &Ledger, signer: &SignerKey) -> crate::Result<(String, u64)> {
    let mut tree = ledger.tree()?;
    let size = tree.size();
    let root = merkle::root(&mut tree, size).map_err(|e| ledger.err(e))?;
    let cp = Checkpoint {
        origin: signer.name.clone(),
        size,
        root,
        extensions: Vec::new(),
    };
    let note = signer
        .sign(&cp.to_text())
        .map_err(|e| Error::bad_input(None, e.to_string()))?;
    Ok((note, size))
}
