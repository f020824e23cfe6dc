//! A sentence-transformers BERT model run in this process on the CPU (candle): the directory
//! holds `config.json`, `tokenizer.json` and `model.safetensors`, and optionally
//! `sentence_bert_config.json` (`max_seq_length`) and `1_Pooling/config.json` (mean or CLS
//! pooling). As sentence-transformers does: tokens cut at `max_seq_length`, the token vectors
//! pooled over the attention mask, the result L2-normalised. Nothing is downloaded.
//!
//! A model directory is untrusted input: every size its files declare that the model uses is
//! checked when it loads (`check_config`, `max_seq_length`), and one out of range is an
//! [`EmbedError::Model`] naming the file and the field (exit 2), never a panic further on.
//! Its id's fingerprint covers everything that decides the vectors (`fingerprint`).

use super::{checked, EmbedError, Embedder, BATCH};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use candle_transformers::models::bert::{BertEncoder, Config};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// A loaded model.
pub struct Bert {
    id: String,
    dim: usize,
    model: Net,
    tokenizer: Tokenizer,
    cls: bool,
}

/// BERT as candle's `BertModel` runs it (word, position and token-type embeddings summed and
/// normalised, then the encoder), except that the word embeddings are read row by row from
/// the mapped weights file instead of being copied into memory whole: they are half of a
/// small model's weights (47 of MiniLM-L6's 91 MB), and a text uses a few dozen rows. Loading
/// a model in each `pmm-turn` or `pmm-recall` process costs half as much, in time and memory.
struct Net {
    /// The mapped weights file.
    file: MmapedSafetensors,
    /// The word embeddings' tensor in it (`f32`, `[vocab, hidden]`).
    words: String,
    vocab: usize,
    hidden: usize,
    positions: Embedding,
    types: Embedding,
    norm: LayerNorm,
    encoder: BertEncoder,
}

impl Net {
    /// Loads the model's tensors from `path` (names as `BertModel::load` finds them: bare,
    /// under `bert.`, or under the config's `model_type`).
    fn load(path: &Path, cfg: &Config) -> Result<Net, String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        // SAFETY: the file is mapped read-only and not modified while the model lives (a
        // model directory is not written by pmm); this is candle's documented way to load.
        let file = unsafe { MmapedSafetensors::new(path) }.map_err(|e| err(&e))?;
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[path], DType::F32, &Device::Cpu) }
            .map_err(|e| err(&e))?;
        let prefixes = [
            Some(String::new()),
            Some("bert".to_string()),
            cfg.model_type.clone(),
        ];
        let prefix = prefixes
            .into_iter()
            .flatten()
            .find(|p| {
                let dot = if p.is_empty() {
                    String::new()
                } else {
                    format!("{p}.")
                };
                file.get(&format!("{dot}embeddings.word_embeddings.weight"))
                    .is_ok()
            })
            .ok_or("no embeddings.word_embeddings.weight tensor")?;
        let vb = if prefix.is_empty() {
            vb
        } else {
            vb.pp(&prefix)
        };
        let words = match prefix.as_str() {
            "" => "embeddings.word_embeddings.weight".to_string(),
            p => format!("{p}.embeddings.word_embeddings.weight"),
        };
        let view = file.get(&words).map_err(|e| err(&e))?;
        let (vocab, hidden) = match view.shape() {
            [v, h] if *h == cfg.hidden_size => (*v, *h),
            s => {
                return Err(format!(
                    "{words} has the shape {s:?}, not [vocab, {}]",
                    cfg.hidden_size
                ))
            }
        };
        if DType::try_from(view.dtype()).ok() != Some(DType::F32)
            || view.data().len() != 4 * vocab * hidden
        {
            return Err(format!("{words} is {:?}, not F32", view.dtype()));
        }
        let e = vb.pp("embeddings");
        let h = cfg.hidden_size;
        Ok(Net {
            positions: candle_nn::embedding(
                cfg.max_position_embeddings,
                h,
                e.pp("position_embeddings"),
            )
            .map_err(|e| err(&e))?,
            types: candle_nn::embedding(cfg.type_vocab_size, h, e.pp("token_type_embeddings"))
                .map_err(|e| err(&e))?,
            norm: candle_nn::layer_norm(h, cfg.layer_norm_eps, e.pp("LayerNorm"))
                .map_err(|e| err(&e))?,
            encoder: BertEncoder::load(vb.pp("encoder"), cfg).map_err(|e| err(&e))?,
            file,
            words,
            vocab,
            hidden,
        })
    }

    /// The token vectors of the last layer, `[batch, tokens, hidden]`.
    fn forward(
        &self,
        ids: &[Vec<u32>],
        types: &Tensor,
        mask: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let dev = Device::Cpu;
        let (batch, len) = (ids.len(), ids.first().map_or(0, Vec::len));
        let table = self.file.get(&self.words)?;
        let table = table.data();
        let row_bytes = 4 * self.hidden;
        let mut words = Vec::with_capacity(batch * len * self.hidden);
        for &id in ids.iter().flatten() {
            let id = id as usize;
            if id >= self.vocab {
                candle_core::bail!("token id {id} is past the vocabulary ({})", self.vocab);
            }
            let row = &table[id * row_bytes..(id + 1) * row_bytes];
            words.extend(
                row.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
        }
        let words = Tensor::from_vec(words, (batch, len, self.hidden), &dev)?;
        let mut x = (&words + self.types.forward(types)?)?;
        let positions = Tensor::new((0..len as u32).collect::<Vec<_>>().as_slice(), &dev)?;
        x = x.broadcast_add(&self.positions.forward(&positions)?)?;
        let x = self.norm.forward(&x)?;
        // As `BertModel`: 0 where the mask is 1, the smallest f32 where it is 0.
        let m = mask.unsqueeze(1)?.unsqueeze(1)?.to_dtype(DType::F32)?;
        let m = (m.ones_like()? - &m)?.broadcast_mul(&Tensor::try_from(f32::MIN)?)?;
        self.encoder.forward(&x, &m)
    }
}

impl Bert {
    /// Loads the model in `dir`; a missing or corrupt file is [`EmbedError::Model`] naming it.
    pub fn load(dir: &Path) -> Result<Bert, EmbedError> {
        let file = |name: &str| -> Result<PathBuf, EmbedError> {
            let p = dir.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                Err(EmbedError::Model(format!(
                    "{} has no {name} (a sentence-transformers model directory holds config.json, tokenizer.json and model.safetensors; docs/recall.md says how to get one)",
                    dir.display()
                )))
            }
        };
        let (config, tokenizer, weights) = (
            file("config.json")?,
            file("tokenizer.json")?,
            file("model.safetensors")?,
        );
        let corrupt = |p: &Path, e: &dyn std::fmt::Display| {
            EmbedError::Model(format!("{}: {}", p.display(), one_line(e)))
        };
        let config_text = std::fs::read_to_string(&config).map_err(|e| corrupt(&config, &e))?;
        let cfg: Config = serde_json::from_str(&config_text).map_err(|e| corrupt(&config, &e))?;
        check_config(&cfg).map_err(|e| corrupt(&config, &e))?;
        let dim = cfg.hidden_size;
        let st_config = dir.join("sentence_bert_config.json");
        let max_len = max_seq_length(&st_config, cfg.max_position_embeddings)
            .map_err(|e| corrupt(&st_config, &e))?;
        let pooling = dir.join("1_Pooling/config.json");
        let cls = cls_pooling(&pooling).map_err(|e| corrupt(&pooling, &e))?;
        // The tokenizer (its JSON parsed: a third of the load) on a second core while the
        // weights are read on this one.
        let (tokenizer, fingerprint, model) = std::thread::scope(|s| {
            let other = s.spawn(|| {
                let t = load_tokenizer(&tokenizer, max_len).map_err(|e| corrupt(&tokenizer, &e));
                let f = fingerprint(&[&config, &tokenizer], &weights, max_len, cls)
                    .map_err(|e| corrupt(&weights, &e));
                (t, f)
            });
            let model = Net::load(&weights, &cfg).map_err(|e| corrupt(&weights, &e));
            let (t, f) = other
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (t, f, model)
        });
        let (tokenizer, fingerprint, model) = (tokenizer?, fingerprint?, model?);
        // Every id the tokenizer can give must have a row in the word embeddings.
        let ids = tokenizer.get_vocab_size(true);
        if ids > model.vocab {
            return Err(corrupt(
                &weights,
                &format!(
                    "the tokenizer has {ids} token ids, but {} has {} rows",
                    model.words, model.vocab
                ),
            ));
        }
        if cfg.vocab_size != model.vocab {
            return Err(corrupt(
                &config,
                &format!(
                    "vocab_size is {}, but {} has {} rows",
                    cfg.vocab_size, model.words, model.vocab
                ),
            ));
        }
        Ok(Bert {
            id: format!("local:{}@{fingerprint}", model_name(dir)),
            dim,
            model,
            tokenizer,
            cls,
        })
    }

    /// A batch's vectors: a single text (a turn's question or reply) on this thread alone, a
    /// larger batch on every core ([`on_this_thread`]).
    fn batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        if texts.len() <= ALONE {
            return on_this_thread(|| self.compute(texts));
        }
        self.compute(texts)
    }

    fn compute(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| e.to_string())?;
        let dev = Device::Cpu;
        let rows = |f: &dyn Fn(&tokenizers::Encoding) -> Vec<u32>| -> Result<Tensor, String> {
            let v: Vec<Tensor> = enc
                .iter()
                .map(|e| Tensor::new(f(e).as_slice(), &dev))
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?;
            Tensor::stack(&v, 0).map_err(|e| e.to_string())
        };
        let ids: Vec<Vec<u32>> = enc.iter().map(|e| e.get_ids().to_vec()).collect();
        let types = rows(&|e| e.get_type_ids().to_vec())?;
        let mask = rows(&|e| e.get_attention_mask().to_vec())?;
        let out = self
            .model
            .forward(&ids, &types, &mask)
            .map_err(|e| e.to_string())?;
        self.pool(&out, &mask).map_err(|e| e.to_string())
    }

    /// Mean of the token vectors under the mask (or the first token's vector).
    fn pool(&self, out: &Tensor, mask: &Tensor) -> candle_core::Result<Vec<Vec<f32>>> {
        let pooled = if self.cls {
            out.narrow(1, 0, 1)?.squeeze(1)?
        } else {
            let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let sum = out.broadcast_mul(&m)?.sum(1)?;
            let count = m.sum(1)?.clamp(1e-9, f64::MAX)?;
            sum.broadcast_div(&count)?
        };
        pooled.to_vec2::<f32>()
    }
}

impl Embedder for Bert {
    fn id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn in_process(&self) -> bool {
        true
    }

    fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Batches of texts of similar length: a batch is padded to its longest text, so
        // sorting by length first saves most of the padding's work.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| (texts[i].len(), i));
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(BATCH) {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            let v = self.batch(&batch).map_err(|detail| EmbedError::Compute {
                model: self.id.clone(),
                detail: one_line(&detail),
            })?;
            if v.len() != chunk.len() {
                return Err(EmbedError::Compute {
                    model: self.id.clone(),
                    detail: format!("{} vectors for {} texts", v.len(), chunk.len()),
                });
            }
            for (&i, vector) in chunk.iter().zip(v) {
                out[i] = vector;
            }
        }
        checked(&self.id, texts.len(), self.dim, out)
    }
}

/// Batches of at most this many texts are embedded on the calling thread alone.
const ALONE: usize = 1;

/// Runs `work` with rayon (which candle's matrix products and element-wise steps use) confined
/// to the calling thread. One short text is a few small matrix products: split over the global
/// pool's threads, each step's hand-off costs about as much as it saves, and the pool's threads
/// then spin for a while before they sleep, taking the cores a turn's recall needs next (its
/// vector search is split over two connections). With candle's matrix products also on one
/// thread ([`super::single_text_threads`]), a turn of a `pmm-turn` reading lines went from
/// 66-72 to 53-57 ms (10^6-event ledger, a vector per message; docs/recall.md).
fn on_this_thread<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    match rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .use_current_thread()
        .build()
    {
        Ok(pool) => pool.install(work),
        // This thread already belongs to a pool: run there.
        Err(_) => work(),
    }
}

fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// The largest width (hidden, intermediate), vocabulary, position table and layer count a
/// model directory may declare: far above any sentence-embedding model, far below what
/// would overflow a size computed from them.
const MAX_WIDTH: usize = 1 << 16;
const MAX_VOCAB: usize = 1 << 22;
const MAX_POSITIONS: usize = 1 << 16;
const MAX_LAYERS: usize = 256;

/// Checks every field of `config.json` that the model uses (a model directory is untrusted
/// input: a zero or a huge size would panic or exhaust memory further on): the error names
/// the field.
fn check_config(cfg: &Config) -> Result<(), String> {
    let within = |field: &str, v: usize, max: usize| {
        if (1..=max).contains(&v) {
            Ok(())
        } else {
            Err(format!("{field} is {v}, not between 1 and {max}"))
        }
    };
    within("hidden_size", cfg.hidden_size, MAX_WIDTH)?;
    within(
        "num_attention_heads",
        cfg.num_attention_heads,
        cfg.hidden_size,
    )?;
    if !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
        return Err(format!(
            "hidden_size {} is not a multiple of num_attention_heads {}",
            cfg.hidden_size, cfg.num_attention_heads
        ));
    }
    within("num_hidden_layers", cfg.num_hidden_layers, MAX_LAYERS)?;
    within("intermediate_size", cfg.intermediate_size, 4 * MAX_WIDTH)?;
    within(
        "max_position_embeddings",
        cfg.max_position_embeddings,
        MAX_POSITIONS,
    )?;
    within("type_vocab_size", cfg.type_vocab_size, MAX_VOCAB)?;
    within("vocab_size", cfg.vocab_size, MAX_VOCAB)?;
    if !(cfg.layer_norm_eps.is_finite() && cfg.layer_norm_eps > 0.0 && cfg.layer_norm_eps < 1.0) {
        return Err(format!(
            "layer_norm_eps is {}, not a small positive number",
            cfg.layer_norm_eps
        ));
    }
    Ok(())
}

/// sentence-transformers' `max_seq_length` from `path` (a file the directory may lack):
/// between 3 (the two special tokens and one of the text) and the model's position table;
/// without the file or the field, the position table's size, at most 512.
fn max_seq_length(path: &Path, positions: usize) -> Result<usize, String> {
    let fallback = positions.min(512);
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(fallback),
        Err(e) => return Err(e.to_string()),
    };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let Some(n) = v.get("max_seq_length").filter(|n| !n.is_null()) else {
        return Ok(fallback);
    };
    match n.as_u64().and_then(|n| usize::try_from(n).ok()) {
        Some(n) if (3..=positions).contains(&n) => Ok(n),
        _ => Err(format!(
            "max_seq_length is {n}, not between 3 and max_position_embeddings ({positions})"
        )),
    }
}

/// Whether the pooling module (`1_Pooling/config.json` at `path`, which the directory may
/// lack: mean pooling) asks for the CLS token's vector instead of the mean.
fn cls_pooling(path: &Path) -> Result<bool, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    Ok(
        v.get("pooling_mode_cls_token") == Some(&serde_json::Value::Bool(true))
            && v.get("pooling_mode_mean_tokens") != Some(&serde_json::Value::Bool(true)),
    )
}

fn load_tokenizer(path: &Path, max_len: usize) -> Result<Tokenizer, String> {
    let mut t = Tokenizer::from_file(path).map_err(|e| e.to_string())?;
    t.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::BatchLongest,
        ..Default::default()
    }));
    t.with_truncation(Some(TruncationParams {
        max_length: max_len,
        ..Default::default()
    }))
    .map_err(|e| e.to_string())?;
    Ok(t)
}

/// The model card's title (`# all-MiniLM-L6-v2` in README.md), else the directory's name:
/// the readable part of the id.
fn model_name(dir: &Path) -> String {
    let title = std::fs::read_to_string(dir.join("README.md"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("# ").map(|s| s.trim().to_string()))
        });
    let name = title.unwrap_or_else(|| {
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into())
    });
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect()
}

/// What decides the vectors: SHA-256 over the config and tokenizer files, the SHA-256 of the
/// whole weights file ([`super::weights::sha256`], cached per file version), the sequence
/// length and the pooling; 12 hex digits.
fn fingerprint(
    files: &[&Path],
    weights: &Path,
    max_len: usize,
    cls: bool,
) -> std::io::Result<String> {
    let mut h = Sha256::new();
    for f in files {
        h.update(std::fs::read(f)?);
    }
    h.update(super::weights::sha256(weights)?.as_bytes());
    h.update(format!("max_seq_length={max_len} cls={cls}").as_bytes());
    let hex: String = h.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work run "on this thread" sees a one-thread pool, gives its result, and still runs
    /// when called from a thread of another pool.
    #[test]
    fn single_texts_run_on_the_calling_thread() {
        let me = std::thread::current().id();
        let (n, id) =
            on_this_thread(|| (rayon::current_num_threads(), std::thread::current().id()));
        assert_eq!((n, id), (1, me));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        assert_eq!(pool.install(|| on_this_thread(|| 6 * 7)), 42);
    }
}
