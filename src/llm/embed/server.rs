//! Embedding servers, through the chat adapters' HTTP client (same timeout, retries and key
//! scrubbing): Ollama's `POST {host}/api/embed` (`{"model","input":[…]}` →
//! `{"embeddings":[[…]]}`) and OpenAI-compatible `POST {base}/embeddings` (`{"model","input":[…]}`
//! → `{"data":[{"index","embedding":[…]}]}`), as llama.cpp's `llama-server --embeddings`,
//! vLLM and OpenAI serve it.
//!
//! A model name is not a model: a server may swap what it serves under a name (`ollama pull`
//! of a newer version, another GGUF behind llama.cpp). Before its first vector, a server's
//! model is identified, and the id names what was found ([`Server::identify`]): Ollama's
//! `POST {host}/api/show` gives the modelfile, whose `FROM …/blobs/sha256-<digest>` is the
//! digest of the weights it runs (`ollama:nomic-embed-text@0a109f422b47`; with an `ADAPTER`
//! or a `PARAMETER` such as `num_ctx`, a hash of them all); an OpenAI-compatible
//! server (or an Ollama that does not say) has no such answer, so a fixed probe text is
//! embedded alone and the id records its dimensions and a hash of the indices and signs of its
//! 8 largest components (`openai:e5@1024d-3f2a9c1b`): another model gives other components,
//! while the tiny differences a server's arithmetic may show from one request to the next
//! leave the largest ones where they are.

use super::super::http::{base_url, shown_url, Http};
use super::super::ollama::with_scheme;
use super::super::scrub::Secrets;
use super::super::{LlmError, DEFAULT_OLLAMA_HOST, DEFAULT_OPENAI_BASE_URL};
use super::{checked, EmbedConfig, EmbedError, Embedder, Provider, BATCH};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The text a model is identified by when its server names no weights digest.
pub const PROBE: &str = "pmm probe: which model makes these vectors?";
/// Components of the probe's vector whose places and signs identify the model.
const PROBE_TOP: usize = 8;

/// An embedding server.
pub struct Server {
    http: Http,
    provider: Provider,
    url: String,
    /// Ollama's `/api/show` (none for OpenAI-compatible servers).
    show: Option<String>,
    model: String,
    key: Option<String>,
    /// `provider:model`, then `provider:model@mark` once identified.
    id: String,
    identified: bool,
    dim: usize,
}

impl Server {
    /// Ollama at `cfg.url` (a host as `$OLLAMA_HOST` takes it) or the default host.
    pub fn ollama(cfg: &EmbedConfig) -> Result<Server, EmbedError> {
        let host = cfg.url.as_deref().unwrap_or(DEFAULT_OLLAMA_HOST);
        let base = base_url("ollama", "embedding host", &with_scheme(host))?;
        let base = base
            .strip_suffix("/api/embed")
            .unwrap_or(&base)
            .trim_end_matches('/');
        let mut s = Server::new(cfg, format!("{base}/api/embed"), None)?;
        s.show = Some(format!("{base}/api/show"));
        Ok(s)
    }

    /// An OpenAI-compatible server at `cfg.url` (the base URL up to `/v1`) or OpenAI's.
    pub fn openai(cfg: &EmbedConfig) -> Result<Server, EmbedError> {
        let base = cfg.url.as_deref().unwrap_or(DEFAULT_OPENAI_BASE_URL);
        let base = base_url("openai", "embedding base URL", base)?;
        let base = base
            .strip_suffix("/embeddings")
            .unwrap_or(&base)
            .trim_end_matches('/');
        Server::new(cfg, format!("{base}/embeddings"), cfg.api_key.clone())
    }

    fn new(cfg: &EmbedConfig, url: String, key: Option<String>) -> Result<Server, EmbedError> {
        if cfg.model.trim().is_empty() {
            return Err(EmbedError::Model(format!(
                "{}: no model name (--embed-model or PMM_EMBED_MODEL)",
                cfg.provider.as_str()
            )));
        }
        let name = cfg.provider.as_str();
        let mut secrets = Secrets::none();
        if let Some(k) = key.as_deref() {
            secrets.bearer(k);
        }
        secrets.url(&url);
        Ok(Server {
            http: Http::new(name, &cfg.http_config(), secrets),
            provider: cfg.provider,
            id: format!("{name}:{}", cfg.model),
            identified: false,
            url,
            show: None,
            model: cfg.model.clone(),
            key,
            dim: 0,
        })
    }

    fn ask(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = json!({"model": self.model, "input": texts});
        let answer = self.http.post_json(&self.url, &body, self.key.as_deref())?;
        let bad = |detail: &str| {
            EmbedError::Server(LlmError::BadResponse {
                provider: self.provider.as_str().into(),
                endpoint: shown_url(&self.url),
                detail: detail.into(),
            })
        };
        let rows: Vec<&Value> = match self.provider {
            Provider::Ollama => answer
                .json
                .get("embeddings")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("no \"embeddings\" array"))?
                .iter()
                .collect(),
            _ => openai_rows(&answer.json).ok_or_else(|| bad("no \"data\" array of embeddings"))?,
        };
        rows.iter()
            .map(|r| {
                r.as_array()
                    .and_then(|a| a.iter().map(|x| x.as_f64().map(|f| f as f32)).collect())
                    .ok_or_else(|| bad("an embedding that is not an array of numbers"))
            })
            .collect()
    }
}

impl Server {
    /// Finds what the server runs under the model's name, once, and makes it part of the id
    /// (the module's documentation says how). Fails as a request does: a server that is down
    /// gives no id, and no vector.
    pub fn identify(&mut self) -> Result<(), EmbedError> {
        if self.identified {
            return Ok(());
        }
        let mark = match self.ollama_digest()? {
            Some(digest) => digest[..12].to_string(),
            None => self.probe()?,
        };
        self.id = format!("{}:{}@{mark}", self.provider.as_str(), self.model);
        self.identified = true;
        Ok(())
    }

    /// What Ollama runs for the model, from its modelfile ([`modelfile_mark`]); `None` when
    /// the server is not Ollama or does not say.
    fn ollama_digest(&self) -> Result<Option<String>, EmbedError> {
        let Some(show) = &self.show else {
            return Ok(None);
        };
        let answer = match self
            .http
            .post_json(show, &json!({"model": self.model}), None)
        {
            Ok(a) => a,
            // Not an Ollama that answers /api/show: the probe decides.
            Err(LlmError::Status { .. } | LlmError::BadResponse { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(answer
            .json
            .get("modelfile")
            .and_then(Value::as_str)
            .and_then(modelfile_mark))
    }

    /// The probe's mark: its dimensions and a hash of the places and signs of its
    /// [`PROBE_TOP`] largest components (`1024d-3f2a9c1b`). Sets the dimensions.
    fn probe(&mut self) -> Result<String, EmbedError> {
        let v = checked(&self.id, 1, self.dim, self.ask(&[PROBE])?)?;
        let v = &v[0];
        self.dim = v.len();
        Ok(format!("{}d-{}", v.len(), probe_hash(v)))
    }
}

/// What in an Ollama modelfile decides the vectors: the weights blob of its `FROM` line (its
/// digest, 64 hex digits), and any `ADAPTER` blob and `PARAMETER` line (`num_ctx` cuts long
/// texts). A plain `FROM` gives the blob's digest itself; with more, SHA-256 over all of them.
/// `None` without a `FROM` blob.
fn modelfile_mark(modelfile: &str) -> Option<String> {
    let blob = |rest: &str| {
        let at = rest.rfind("sha256-")? + "sha256-".len();
        let hex = rest[at..].trim();
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| hex.to_ascii_lowercase())
    };
    let (mut from, mut more) = (None, Vec::new());
    for l in modelfile.lines().map(str::trim) {
        if let Some(rest) = l.strip_prefix("FROM ") {
            from = from.or_else(|| blob(rest));
        } else if let Some(rest) = l.strip_prefix("ADAPTER ") {
            more.push(blob(rest).unwrap_or_else(|| rest.to_string()));
        } else if l.starts_with("PARAMETER ") {
            more.push(l.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    let from = from?;
    if more.is_empty() {
        return Some(from);
    }
    more.sort();
    let mut h = Sha256::new();
    h.update(from.as_bytes());
    for m in more {
        h.update(b"\n");
        h.update(m.as_bytes());
    }
    Some(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// 8 hex digits of SHA-256 over the places (in order) and signs of the [`PROBE_TOP`] largest
/// components of `v`.
fn probe_hash(v: &[f32]) -> String {
    let mut top: Vec<usize> = (0..v.len()).collect();
    top.sort_by(|&a, &b| v[b].abs().total_cmp(&v[a].abs()).then(a.cmp(&b)));
    top.truncate(PROBE_TOP);
    top.sort_unstable();
    let mut h = Sha256::new();
    for i in top {
        h.update((i as u64).to_le_bytes());
        h.update([u8::from(v[i] < 0.0)]);
    }
    h.finalize()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// OpenAI's `data`, put in `index` order (servers may answer out of order).
fn openai_rows(json: &Value) -> Option<Vec<&Value>> {
    let data = json.get("data")?.as_array()?;
    let mut rows: Vec<(u64, &Value)> = data
        .iter()
        .map(|d| Some((d.get("index")?.as_u64()?, d.get("embedding")?)))
        .collect::<Option<_>>()?;
    rows.sort_by_key(|r| r.0);
    Some(rows.into_iter().map(|r| r.1).collect())
}

impl Embedder for Server {
    fn id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn identify(&mut self) -> Result<(), EmbedError> {
        Server::identify(self)
    }

    fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.identify()?;
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(BATCH) {
            let v = checked(&self.id, chunk.len(), self.dim, self.ask(chunk)?)?;
            self.dim = v.first().map_or(self.dim, Vec::len);
            out.extend(v);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modelfile_is_marked_by_its_blobs_and_parameters() {
        let d = "0a".repeat(32);
        let plain = format!("# Modelfile generated by \"ollama show\"\nFROM /m/blobs/sha256-{d}\n");
        assert_eq!(modelfile_mark(&plain), Some(d.clone()));
        let other_dir = format!("FROM /elsewhere/blobs/sha256-{d}\nTEMPLATE {{{{ .Prompt }}}}");
        assert_eq!(modelfile_mark(&other_dir), Some(d.clone()));
        let ctx = format!("{plain}PARAMETER num_ctx 256\n");
        let ctx2 = format!("{plain}PARAMETER num_ctx 512\n");
        let adapter = format!("{plain}ADAPTER /m/blobs/sha256-{}\n", "1b".repeat(32));
        let marks = [&ctx, &ctx2, &adapter].map(|m| modelfile_mark(m).unwrap());
        assert!(marks.iter().all(|m| m.len() == 64 && *m != d), "{marks:?}");
        assert!(marks[0] != marks[1] && marks[1] != marks[2]);
        assert_eq!(modelfile_mark("FROM nomic-embed-text"), None);
        assert_eq!(modelfile_mark(""), None);
    }

    #[test]
    fn the_probe_hash_keeps_to_the_largest_components() {
        let v = [0.1, -0.9, 0.05, 0.8, 0.0, -0.3, 0.2, 0.25, 0.6, -0.01, 0.02];
        let mut noisy = v;
        noisy.iter_mut().for_each(|x| *x += 1e-4);
        assert_eq!(probe_hash(&v), probe_hash(&noisy));
        let mut flipped = v;
        flipped[1] = 0.9;
        assert_ne!(probe_hash(&v), probe_hash(&flipped));
        let mut moved = v;
        moved.swap(3, 4);
        assert_ne!(probe_hash(&v), probe_hash(&moved));
    }
}
