//! `--receipt FILE --key KEYFILE`: what a person can keep as proof of an erasure. A JSON
//! object: the erased events (id, kind, the hash that stays their Merkle leaf, the `erasure`
//! event that names them, and an inclusion proof of each at the checkpoint's size) and a
//! signed checkpoint of the ledger's tree taken after the erasure, with the ledger's key.
//! `pmm-verify --checkpoint` accepts the checkpoint (on the ledger: it only grew since) and
//! `pmm-verify --check-proof` each proof against it, with no ledger at all.

use crate::chain::note::SignerKey;
use crate::event::Event;
use crate::outfile::OutputFile;
use crate::store::Ledger;
use crate::Error;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;

/// The receipt's file and key, checked before anything is erased.
pub(super) struct Receipt {
    file: OutputFile,
    signer: SignerKey,
}

impl Receipt {
    /// Reads the key and starts the output file (never the ledger or a companion of it).
    pub(super) fn start(target: &Path, key: &Path, ledger: &Path) -> anyhow::Result<Receipt> {
        let text = crate::cli::read_small_file(key)?;
        let signer = SignerKey::parse(&text)
            .map_err(|e| Error::bad_input(Some(key.display().to_string()), e.to_string()))?;
        let file = OutputFile::create(target, Some(ledger))?;
        Ok(Receipt { file, signer })
    }

    /// Writes the receipt of the `erasures` just committed on `ledger` and puts the file in
    /// place.
    pub(super) fn finish(self, ledger: &Ledger, erasures: &[Event]) -> anyhow::Result<()> {
        let (note, size) = crate::audit::prove::signed_checkpoint(ledger, &self.signer)?;
        let mut erased = Vec::with_capacity(erasures.len());
        for e in erasures {
            erased.push(entry(ledger, e, size)?);
        }
        let receipt = json!({
            "type": "erasure_receipt",
            "origin": self.signer.name,
            "size": size,
            "erased": erased,
            "checkpoint": note,
        });
        let mut w = self.file.writer()?;
        serde_json::to_writer_pretty(&mut w, &receipt)?;
        w.write_all(b"\n")?;
        w.flush()?;
        drop(w);
        self.file.commit()?;
        Ok(())
    }
}

/// One erased event of the receipt: what the `erasure` event names, and the inclusion proof
/// of the erased event (its leaf is its stored hash) in the tree of `size`.
fn entry(ledger: &Ledger, erasure: &Event, size: u64) -> anyhow::Result<Value> {
    let meta = erasure.meta_map().unwrap_or_default();
    let id = meta.get("erased_id").and_then(Value::as_i64).unwrap_or(0);
    let proof = crate::audit::prove::inclusion(ledger, id, Some(size), "--receipt")?;
    Ok(json!({
        "id": id,
        "hash": meta.get("erased_hash"),
        "kind": meta.get("erased_kind"),
        "erasure_id": erasure.id,
        "erasure_hash": erasure.hash,
        "proof": proof,
    }))
}
