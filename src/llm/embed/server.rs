//! Embedding servers, through the chat adapters' HTTP client (same timeout, retries and key
//! scrubbing): Ollama's `POST {host}/api/embed` (`{"model","input":[…]}` →
//! `{"embeddings":[[…]]}`) and OpenAI-compatible `POST {base}/embeddings` (`{"model","input":[…]}`
//! → `{"data":[{"index","embedding":[…]}]}`), as llama.cpp's `llama-server --embeddings`,
//! vLLM and OpenAI serve it.

use super::super::http::{base_url, shown_url, Http};
use super::super::ollama::with_scheme;
use super::super::scrub::Secrets;
use super::super::{LlmError, DEFAULT_OLLAMA_HOST, DEFAULT_OPENAI_BASE_URL};
use super::{checked, EmbedConfig, EmbedError, Embedder, Provider, BATCH};
use serde_json::{json, Value};

/// An embedding server.
pub struct Server {
    http: Http,
    provider: Provider,
    url: String,
    model: String,
    key: Option<String>,
    id: String,
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
        Server::new(cfg, format!("{base}/api/embed"), None)
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
            url,
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

    fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(BATCH) {
            let v = checked(&self.id, chunk.len(), self.dim, self.ask(chunk)?)?;
            self.dim = v.first().map_or(self.dim, Vec::len);
            out.extend(v);
        }
        Ok(out)
    }
}
