//! Ollama's native chat API: `POST {host}/api/chat`, one non-streamed answer, or (when the
//! reply is wanted as it is generated) a stream of JSON lines, each with a piece of
//! `message.content`, the last with `"done": true` and the token counts.

use super::http::{base_url, shown_url, Flow, Http, StreamError, StreamEvent, MAX_REPLY};
use super::preflight::{self, Probe};
use super::scrub::{Holdback, Secrets};
use super::{Adapter, Cancel, Config, LlmError, Reply, Request, TextSink};
use serde_json::{json, Value};

/// Ollama's own default port, added to a bare `$OLLAMA_HOST` such as `0.0.0.0` the way the
/// ollama client does.
const DEFAULT_PORT: u16 = 11434;

/// The ollama adapter.
pub(crate) struct Ollama {
    http: Http,
    probe: Probe,
    base: String,
    url: String,
    model: String,
    /// What the server may echo back: the credentials of `$OLLAMA_HOST` (and the key).
    secrets: Secrets,
}

impl Ollama {
    /// Checks the host and builds the adapter.
    pub(crate) fn new(cfg: &Config) -> Result<Ollama, LlmError> {
        let base = base_url("ollama", "OLLAMA_HOST", &with_scheme(&cfg.ollama_host))?;
        // A host given with the endpoint's path (…/api/chat) is taken as the host.
        let base = ["/api/chat", "/api"]
            .iter()
            .find_map(|p| base.strip_suffix(p))
            .unwrap_or(&base)
            .trim_end_matches('/')
            .to_string();
        let secrets = Secrets::of(cfg);
        Ok(Ollama {
            http: Http::new("ollama", cfg, secrets.clone()),
            probe: Probe::new("ollama", cfg, None, secrets.clone()),
            url: format!("{base}/api/chat"),
            base,
            model: cfg.model_name().to_string(),
            secrets,
        })
    }
}

/// `$OLLAMA_HOST` as a URL: ollama itself accepts `host`, `host:port` and full URLs.
pub(crate) fn with_scheme(host: &str) -> String {
    let host = host.trim();
    if host.contains("://") {
        return host.to_string();
    }
    let authority = host.split('/').next().unwrap_or_default();
    // `[::1]` has colons but no port; `[::1]:80` and `h:80` have one.
    let has_port = match authority.rsplit_once(':') {
        Some((h, port)) => {
            (!h.contains(':') || h.ends_with(']')) && port.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    };
    if has_port {
        format!("http://{host}")
    } else {
        let rest = &host[authority.len()..];
        format!("http://{authority}:{DEFAULT_PORT}{rest}")
    }
}

impl Adapter for Ollama {
    fn provider(&self) -> &str {
        "ollama"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn preflight(&mut self) -> Result<(), LlmError> {
        preflight::ollama(&self.probe, &self.base, &self.model)
    }

    fn endpoint(&self) -> String {
        shown_url(&self.url)
    }

    fn generate(&mut self, req: &Request) -> Result<Reply, LlmError> {
        self.generate_with(req, None, None)
    }

    fn generate_with(
        &mut self,
        req: &Request,
        sink: Option<&TextSink>,
        cancel: Option<&Cancel>,
    ) -> Result<Reply, LlmError> {
        let mut options = json!({"temperature": req.temperature, "top_p": req.top_p});
        if let Some(seed) = req.seed {
            options["seed"] = seed.into();
        }
        if let Some(n) = req.max_tokens {
            options["num_predict"] = n.into();
        }
        options["num_ctx"] = num_ctx(req).into();
        let mut body = json!({
            "model": self.model,
            "messages": req.messages(),
            "stream": false,
            "options": options,
        });
        if let Some(sink) = sink {
            body["stream"] = true.into();
            return self.stream(&body, sink, cancel);
        }
        let answer = self
            .http
            .post_json_cancellable(&self.url, &body, None, cancel)?;
        let json = &answer.json;
        let text = json
            .pointer("/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                let why = match json.get("error").and_then(Value::as_str) {
                    Some(e) => format!("error: {e}"),
                    None => "no message.content".into(),
                };
                self.http.bad_response(&self.url, why)
            })?;
        Ok(Reply {
            text: text.to_string(),
            model: json
                .get("model")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                .unwrap_or(&self.model)
                .to_string(),
            in_tokens: json.get("prompt_eval_count").and_then(Value::as_u64),
            out_tokens: json.get("eval_count").and_then(Value::as_u64),
            latency_ms: answer.latency_ms,
            attempts: answer.attempts,
            finish_reason: json
                .get("done_reason")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }
}

impl Ollama {
    /// Asks for a streamed answer and hands its pieces to `sink`, ending it past
    /// [`MAX_REPLY`] bytes.
    fn stream(
        &self,
        body: &Value,
        sink: &TextSink,
        cancel: Option<&Cancel>,
    ) -> Result<Reply, LlmError> {
        let mut text = String::new();
        let mut last = Value::Null;
        // What is shown never holds a secret, even split over pieces.
        let mut shown = Holdback::new(&self.secrets);
        let streamed = self
            .http
            .post_stream(&self.url, body, None, cancel, |event| {
                let line = match event {
                    StreamEvent::Line(l) if l.trim().is_empty() => return Ok(Flow::More),
                    StreamEvent::Line(l) => l,
                    StreamEvent::End => return Ok(Flow::More),
                };
                let chunk: Value =
                    serde_json::from_str(line).map_err(|source| StreamError::NotJson {
                        what: "a line",
                        source,
                    })?;
                if let Some(e) = chunk.get("error") {
                    let e = e.as_str().map_or_else(|| e.to_string(), str::to_string);
                    return Err(StreamError::Server(e));
                }
                if let Some(piece) = chunk.pointer("/message/content").and_then(Value::as_str) {
                    if text.len() + piece.len() > MAX_REPLY {
                        return Err(StreamError::TooBig);
                    }
                    text.push_str(piece);
                    sink.send(&shown.push(piece));
                }
                let done = chunk.get("done").and_then(Value::as_bool) == Some(true);
                last = chunk;
                Ok(if done { Flow::Done } else { Flow::More })
            })?;
        sink.send(&shown.finish());
        Ok(Reply {
            text: self.secrets.text(&text),
            model: last
                .get("model")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                .unwrap_or(&self.model)
                .to_string(),
            finish_reason: last
                .get("done_reason")
                .and_then(Value::as_str)
                .map(str::to_string),
            in_tokens: last.get("prompt_eval_count").and_then(Value::as_u64),
            out_tokens: last.get("eval_count").and_then(Value::as_u64),
            latency_ms: streamed.latency_ms,
            attempts: streamed.attempts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_hosts_become_urls() {
        assert_eq!(with_scheme("127.0.0.1:11434"), "http://127.0.0.1:11434");
        assert_eq!(with_scheme("0.0.0.0"), "http://0.0.0.0:11434");
        assert_eq!(with_scheme("gpu-box:8080"), "http://gpu-box:8080");
        assert_eq!(with_scheme("[::1]"), "http://[::1]:11434");
        assert_eq!(with_scheme("[::1]:99"), "http://[::1]:99");
        assert_eq!(with_scheme("https://ollama.lan/"), "https://ollama.lan/");
    }

    #[test]
    fn the_chat_url_is_built_from_the_host() {
        let mut cfg = Config::new(crate::llm::AdapterKind::Ollama);
        cfg.ollama_host = "localhost:1234/".into();
        let a = Ollama::new(&cfg).unwrap();
        assert_eq!(a.url, "http://localhost:1234/api/chat");
        assert_eq!(a.model(), "llama3.2");
        cfg.ollama_host = "http://localhost:1234/api/chat".into();
        assert_eq!(
            Ollama::new(&cfg).unwrap().url,
            "http://localhost:1234/api/chat"
        );
    }
}

/// Ollama's context window for a request (`options.num_ctx`): Ollama cuts a longer prompt
/// silently, keeping its end. Room for the whole prompt (at a conservative 3 characters a
/// token) and the reply (`max_tokens`, else 1,024), rounded up to a multiple of 4,096 so
/// that turns of similar size ask for the same window (a new size reloads the model), and
/// never below 4,096 or above 131,072.
pub(crate) fn num_ctx(req: &Request) -> u64 {
    let chars: usize = req.system.chars().count()
        + req.user.chars().count()
        + req
            .history
            .iter()
            .map(|(_, c)| c.chars().count() + 16)
            .sum::<usize>();
    let tokens = chars as u64 / 3 + 64 + u64::from(req.max_tokens.unwrap_or(1024));
    tokens.div_ceil(4096).clamp(1, 32) * 4096
}

#[cfg(test)]
mod ctx_tests {
    use super::*;

    #[test]
    fn the_window_covers_the_prompt_and_the_reply() {
        let small = Request::default();
        assert_eq!(num_ctx(&small), 4096);
        let big = Request {
            system: "x".repeat(30_000),
            max_tokens: Some(512),
            ..Request::default()
        };
        assert_eq!(num_ctx(&big), 12_288);
        let huge = Request {
            system: "x".repeat(10_000_000),
            ..Request::default()
        };
        assert_eq!(num_ctx(&huge), 131_072);
    }
}
