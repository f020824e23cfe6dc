//! Making and checking the dense source's vectors over a whole ledger: the backfill of
//! `pmm-recall --embed` (resumable: it embeds the events that have no vector of the model,
//! in id order, each batch committed on its own) and the recomputation of `--check`.

use crate::llm::embed::{EmbedError, Shared};
use crate::store::log::SessionWriter;
use crate::store::Indexes;
use crate::Result;

/// Events embedded per batch (and per write transaction).
pub const BATCH: usize = 64;
/// Characters of an event's text given to the model (it reads at most a few hundred tokens;
/// the rest would only cost tokenizing).
pub const MAX_CHARS: usize = 2_000;
/// The cosine a recomputed vector must have with its stored one (stored vectors are `i8`:
/// their own error is below 0.001).
pub const CHECK_TOLERANCE: f32 = 0.995;

/// What a backfill did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Backfill {
    /// Vectors made and stored now.
    pub embedded: u64,
    /// Events that had none when it began.
    pub missing: u64,
    /// Whether it stopped early (a signal); what it finished is kept.
    pub interrupted: bool,
}

/// The text of an event as the model is given it.
pub fn embed_text(content: &str) -> &str {
    match content.char_indices().nth(MAX_CHARS) {
        Some((at, _)) => &content[..at],
        None => content,
    }
}

/// Embeds every recallable event without a vector of `e`'s model, [`BATCH`] at a time, each
/// batch stored in a write transaction of its own (the model runs before it begins).
/// `stop` is asked between batches; `progress(done, total)` after each. A model failure ends
/// it with that error, keeping the batches already stored.
pub fn backfill<W: SessionWriter>(
    ledger: &mut W,
    e: &Shared,
    stop: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(u64, u64),
) -> std::result::Result<Backfill, BackfillError> {
    e.identify()?;
    let id = e.id();
    let missing = ledger.missing_vector_count(&id)?;
    let mut done = Backfill {
        missing,
        ..Backfill::default()
    };
    let mut after = 0;
    loop {
        if stop() {
            done.interrupted = true;
            break;
        }
        let batch = ledger.missing_vectors(&id, after, BATCH)?;
        let Some(last) = batch.last().map(|b| b.0) else {
            break;
        };
        let texts: Vec<&str> = batch.iter().map(|(_, t)| embed_text(t)).collect();
        let v = e.embed(&texts)?;
        let dim = v.first().map_or(0, Vec::len);
        let pairs: Vec<(i64, Vec<f32>)> = batch.iter().map(|b| b.0).zip(v).collect();
        done.embedded += put(ledger, &id, dim, &pairs)? as u64;
        after = last;
        progress(done.embedded, missing);
    }
    Ok(done)
}

/// One bounded step of the backfill (what a tick does): embeds at most [`BATCH`] of the
/// oldest events without a vector and stores them; returns how many.
pub fn backfill_step<W: SessionWriter>(
    ledger: &mut W,
    e: &Shared,
) -> std::result::Result<u64, BackfillError> {
    e.identify()?;
    let id = e.id();
    let batch = ledger.missing_vectors(&id, 0, BATCH)?;
    if batch.is_empty() {
        return Ok(0);
    }
    let texts: Vec<&str> = batch.iter().map(|(_, t)| embed_text(t)).collect();
    let v = e.embed(&texts)?;
    let dim = v.first().map_or(0, Vec::len);
    let pairs: Vec<(i64, Vec<f32>)> = batch.iter().map(|b| b.0).zip(v).collect();
    Ok(put(ledger, &id, dim, &pairs)? as u64)
}

/// Stores the vectors `pairs` of model `id` (`dim` dimensions) in a write transaction of
/// their own: how many were new.
fn put<W: SessionWriter>(
    w: &mut W,
    id: &str,
    dim: usize,
    pairs: &[(i64, Vec<f32>)],
) -> Result<usize> {
    w.session(&mut |tx| tx.put_vectors(id, dim, pairs))
}

/// The ledger's other vector spaces of `id`'s model name (`local:NAME@…`, or a server's
/// `ollama:NAME` as an older pmm named it) holding more vectors than `id`'s: `(id, vectors)`.
/// They were made with other weights, by another model behind the same name, or under an
/// older pmm's fingerprint (docs/recall.md), and are never compared with `id`'s; a program
/// says so, since recall by meaning finds little until the events are embedded again.
pub fn other_spaces<R: Indexes>(r: &R, id: &str) -> Result<Vec<(String, u64)>> {
    let name = id.split_once('@').map_or(id, |(n, _)| n);
    let models = r.vector_models()?;
    let own = models.iter().find(|m| m.0 == id).map_or(0, |m| m.2);
    Ok(models
        .into_iter()
        .filter(|(other, _, n)| {
            other != id
                && *n > own
                && (other == name || other.strip_prefix(name).is_some_and(|t| t.starts_with('@')))
        })
        .map(|(other, _, n)| (other, n))
        .collect())
}

/// Why a backfill or a check stopped.
#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    /// The ledger.
    #[error(transparent)]
    Store(#[from] crate::Error),
    /// The model.
    #[error(transparent)]
    Embed(#[from] EmbedError),
}

/// One vector that no longer matches its event.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// The event.
    pub id: i64,
    /// The cosine of the stored and the recomputed vector.
    pub cosine: f32,
}

/// Recomputes the stored vectors of `e`'s model (at most `limit`, oldest first) and returns
/// those whose cosine with the recomputed one is below [`CHECK_TOLERANCE`], with how many were
/// compared.
pub fn check<R: Indexes>(
    r: &R,
    e: &Shared,
    limit: usize,
    progress: &mut dyn FnMut(u64, u64),
) -> std::result::Result<(Vec<Mismatch>, u64), BackfillError> {
    e.identify()?;
    let stored = r.stored_vectors(&e.id(), limit)?;
    let total = stored.len() as u64;
    let mut bad = Vec::new();
    let mut seen = 0u64;
    for chunk in stored.chunks(BATCH) {
        let texts: Vec<String> = chunk
            .iter()
            .map(|(id, _)| {
                r.get(*id).map(|ev| {
                    ev.map(|ev| embed_text(&ev.content).to_string())
                        .unwrap_or_default()
                })
            })
            .collect::<Result<_>>()?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        for ((id, q), v) in chunk.iter().zip(e.embed(&refs)?) {
            let cosine = crate::vector::dot_quantized(q, &v).unwrap_or(0.0);
            if cosine < CHECK_TOLERANCE {
                bad.push(Mismatch { id: *id, cosine });
            }
        }
        seen += chunk.len() as u64;
        progress(seen, total);
    }
    Ok((bad, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_CHARS + 10);
        assert_eq!(embed_text(&long).chars().count(), MAX_CHARS);
        assert_eq!(embed_text("short"), "short");
    }
}
