//! Inclusion proofs of single events, as `pmm-verify --prove` prints them and the MCP server's
//! `prove` tool returns them: the library half, so that both give the same record.

use crate::chain::compute;
use crate::chain::merkle;
use crate::chain::note::{Checkpoint, SignerKey};
use crate::chain::proof::{Hex, Proof};
use crate::event::Event;
use crate::store::{EventLog, Ledger, Tree};
use crate::Error;
use serde_json::Value;

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
    if let Some(why) = unvouched(ledger, id)? {
        return Err(Error::NotFound(format!(
            "event {id} cannot be proved: {why} (run pmm-verify)"
        )));
    }
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

/// Why the event's stored hash — the leaf a proof vouches for — does not stand for the event
/// as it is, if it does not: its content, meta or link no longer give that hash (an edit in
/// place), unless it was erased by an `erasure` event that verifies and names it with that
/// hash (docs/verification.md, "Erasure"). The stored tree is not consulted: it is a cache.
fn unvouched(ledger: &Ledger, id: i64) -> crate::Result<Option<String>> {
    let Some(ev) = ledger.get(id)? else {
        return Ok(Some("there is no such event".into()));
    };
    let mut scratch = Vec::new();
    let recomputes = |ev: &Event, scratch: &mut Vec<u8>| {
        compute(scratch, ev, None).is_ok_and(|d| ev.hash.as_deref() == Some(d.to_hex().as_str()))
    };
    if recomputes(&ev, &mut scratch) {
        return Ok(None);
    }
    let edited =
        Some("its stored hash is not the hash of its content (it was changed in place)".into());
    if !(ev.content.is_empty() && ev.meta == "{}") {
        return Ok(edited);
    }
    let Some(erasure) = ledger
        .erased_by(id)?
        .map(|e| ledger.get(e))
        .transpose()?
        .flatten()
    else {
        return Ok(edited);
    };
    let names = erasure.meta_map().ok().is_some_and(|m| {
        m.get("erased_id").and_then(Value::as_i64) == Some(id)
            && m.get("erased_hash").and_then(Value::as_str) == ev.hash.as_deref()
    });
    Ok((!(names && recomputes(&erasure, &mut scratch)))
        .then_some(edited)
        .flatten())
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
