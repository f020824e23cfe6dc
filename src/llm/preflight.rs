//! The check before a turn: mistakes that are known before anything is
//! appended — a refused connection, an unknown model, a rejected key, a server that speaks
//! another API — are found with one cheap request and reported as [`LlmError::Preflight`]
//! (exit 3, nothing written), with a hint. Anything the check cannot be sure of (a timeout, a
//! 5xx, an answer it does not understand) passes: the turn then asks the model, and a
//! failure of that call is recorded as a `generation_failure`.
//!
//! - ollama: `POST {host}/api/show {"model"}`: 200 is a model Ollama has; Ollama's own 404
//!   (`{"error":"model '…' not found"}`) is a model to pull; any other 404 is a server that is
//!   not Ollama, and `GET {host}/v1/models` says whether it speaks the OpenAI API instead.
//! - openai: `GET {base}/models`: 401/403 is a rejected (or missing) key; a model not in the
//!   list is asked for by name (`GET {base}/models/NAME`) and is unknown only when the server
//!   says so by name (OpenAI's `model_not_found`), since single-model servers (llama.cpp)
//!   answer to any name; a 404 for the list from a base URL without `/v1`, where
//!   `{base}/v1/models` answers, is a base URL missing its `/v1`.

use super::http::{excerpt, shown_url};
use super::scrub::Secrets;
use super::{Config, LlmError};
use serde_json::{json, Value};
use std::time::Duration;

/// The longest a check waits for an answer: it is cheap, and a server too busy to answer it
/// is left to the turn.
const MAX_WAIT: Duration = Duration::from_secs(15);

/// How a check went.
enum Got {
    /// An HTTP answer: status and body.
    Answer(u16, String),
    /// No connection (refused, unresolvable host): what happened.
    Down(String),
    /// Nothing that proves anything (a timeout, a dropped connection, a redirect).
    Unsure,
}

/// The client of the checks of one adapter.
pub(crate) struct Probe {
    agent: ureq::Agent,
    provider: &'static str,
    /// The bearer token, sent when there is one.
    key: Option<String>,
    /// Scrubbed from every error.
    secrets: Secrets,
    retries: u32,
    backoff: Duration,
}

impl Probe {
    /// A client with `cfg`'s retry policy for refused connections; `key` is the bearer token,
    /// sent, and `secrets` (the key among them) are scrubbed.
    pub(crate) fn new(
        provider: &'static str,
        cfg: &Config,
        key: Option<String>,
        secrets: Secrets,
    ) -> Probe {
        let wait = cfg.timeout.min(MAX_WAIT);
        Probe {
            agent: ureq::AgentBuilder::new()
                .timeout(wait)
                .timeout_connect(wait.min(Duration::from_secs(10)))
                .user_agent(concat!("pmm/", env!("CARGO_PKG_VERSION")))
                .redirects(0)
                .build(),
            provider,
            key: key.filter(|s| !s.is_empty()),
            secrets,
            retries: cfg.retries,
            backoff: cfg.backoff,
        }
    }

    fn get(&self, url: &str) -> Got {
        self.send(url, None)
    }

    fn post(&self, url: &str, body: &Value) -> Got {
        self.send(url, Some(body))
    }

    /// One request, retried (with the adapter's backoff) only while the connection is
    /// refused: a server that is starting gets the same patience as a turn gives it.
    fn send(&self, url: &str, body: Option<&Value>) -> Got {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let mut req = match body {
                Some(_) => self.agent.post(url),
                None => self.agent.get(url),
            }
            .set("Accept", "application/json");
            if let Some(key) = &self.key {
                req = req.set("Authorization", &format!("Bearer {key}"));
            }
            let result = match body {
                Some(b) => req
                    .set("Content-Type", "application/json")
                    .send_string(&b.to_string()),
                None => req.call(),
            };
            let got = match result {
                Ok(r) if r.status() == 200 => match r.into_string() {
                    Ok(text) => Got::Answer(200, text),
                    Err(_) => Got::Unsure,
                },
                Ok(_) => Got::Unsure,
                Err(ureq::Error::Status(code, r)) => {
                    Got::Answer(code, r.into_string().unwrap_or_default())
                }
                Err(ureq::Error::Transport(t)) => down(&t),
            };
            match got {
                Got::Down(_) if attempts <= self.retries => {
                    let factor = 1u32 << (attempts - 1).min(16);
                    std::thread::sleep(
                        self.backoff
                            .saturating_mul(factor)
                            .min(Duration::from_secs(30)),
                    );
                }
                got => return got,
            }
        }
    }

    /// The error for a failed check, with the secrets scrubbed from everything in it.
    fn fail(&self, url: &str, detail: impl Into<String>, hint: impl Into<String>) -> LlmError {
        let detail = format!("{}; {}", detail.into(), hint.into());
        LlmError::Preflight {
            provider: self.provider.to_string(),
            endpoint: shown_url(url),
            detail: self.secrets.redact(&detail),
        }
    }

    /// `HTTP 404: <the body's error message>`.
    fn status(&self, code: u16, body: &str) -> String {
        let e = excerpt(body, &self.secrets);
        if e.is_empty() {
            format!("HTTP {code}")
        } else {
            format!("HTTP {code}: {e}")
        }
    }
}

/// A transport failure that means nobody answers there, or [`Got::Unsure`].
fn down(t: &ureq::Transport) -> Got {
    use ureq::ErrorKind as K;
    match t.kind() {
        K::Dns => Got::Down("cannot resolve the host".into()),
        K::ConnectionFailed => {
            let mut cause = std::error::Error::source(t);
            while let Some(e) = cause {
                if let Some(io) = e.downcast_ref::<std::io::Error>() {
                    return match io.kind() {
                        std::io::ErrorKind::ConnectionRefused => {
                            Got::Down("connection refused".into())
                        }
                        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                            Got::Unsure
                        }
                        _ => Got::Down(format!("cannot connect ({io})")),
                    };
                }
                cause = e.source();
            }
            Got::Down("cannot connect".into())
        }
        _ => Got::Unsure,
    }
}

/// True for a body that is an OpenAI model list (`{"data":[…]}`).
fn model_list(body: &str) -> Option<Vec<String>> {
    let v: Value = serde_json::from_str(body).ok()?;
    let data = v.get("data")?.as_array()?;
    Some(
        data.iter()
            .filter_map(|m| m.get("id").and_then(Value::as_str))
            .map(str::to_string)
            .collect(),
    )
}

/// Ollama's own error body: `{"error": "<string>"}` (OpenAI-style servers nest an object).
fn ollama_error(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    v.get("error")?.as_str().map(str::to_string)
}

/// The hint for Ollama's "model not found".
pub(crate) fn pull_hint(model: &str) -> String {
    format!("pull it with `ollama pull {model}`, or pick one it has (`ollama list`) with --model")
}

/// Checks an Ollama server at `base` (no trailing slash) for `model`.
pub(crate) fn ollama(p: &Probe, base: &str, model: &str) -> Result<(), LlmError> {
    let url = format!("{base}/api/show");
    match p.post(&url, &json!({"model": model, "name": model})) {
        Got::Down(detail) => Err(p.fail(
            &url,
            detail,
            "is Ollama running? Start it with `ollama serve`, or set OLLAMA_HOST to where it listens",
        )),
        Got::Answer(404, body) => {
            if let Some(e) = ollama_error(&body).filter(|e| e.contains("not found")) {
                return Err(p.fail(&url, e, pull_hint(model)));
            }
            let shown = shown_url(base);
            let hint = match p.get(&format!("{base}/v1/models")) {
                Got::Answer(200, b) if model_list(&b).is_some() => format!(
                    "the server at OLLAMA_HOST speaks the OpenAI API, not Ollama's: use --adapter openai with OPENAI_BASE_URL={shown}/v1"
                ),
                _ => format!("OLLAMA_HOST={shown} does not look like an Ollama server"),
            };
            Err(p.fail(&url, p.status(404, &body), hint))
        }
        Got::Answer(code @ (401 | 403), body) => Err(p.fail(
            &url,
            p.status(code, &body),
            "the server (or a proxy in front of it) refuses the request; check OLLAMA_HOST",
        )),
        _ => Ok(()),
    }
}

/// Checks an OpenAI-compatible server at `base` (no trailing slash) for `model`, with the key
/// the probe sends.
pub(crate) fn openai(p: &Probe, base: &str, model: &str) -> Result<(), LlmError> {
    let url = format!("{base}/models");
    match p.get(&url) {
        Got::Down(detail) => Err(p.fail(
            &url,
            detail,
            "is the server running? Check OPENAI_BASE_URL (it should end in /v1)",
        )),
        Got::Answer(code @ (401 | 403), body) => {
            let hint = if p.key.is_some() {
                "the server rejected the API key: check OPENAI_API_KEY"
            } else {
                "the server wants an API key: set OPENAI_API_KEY (in the environment or .env)"
            };
            Err(p.fail(&url, p.status(code, &body), hint))
        }
        Got::Answer(200, body) => {
            let Some(ids) = model_list(&body) else {
                return Ok(());
            };
            // A name the path cannot carry as one segment is left to the turn.
            let plain = !model.is_empty()
                && model
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.:@+".contains(c));
            if ids.iter().any(|id| id == model) || !plain {
                return Ok(());
            }
            let one = format!("{base}/models/{model}");
            match p.get(&one) {
                Got::Answer(404, b)
                    if b.contains("model_not_found")
                        || excerpt(&b, &Secrets::none()).contains(model) =>
                {
                    let mut some: Vec<&str> = ids.iter().map(String::as_str).take(8).collect();
                    if ids.len() > some.len() {
                        some.push("…");
                    }
                    let hint = if some.is_empty() {
                        "pick another with --model or PMM_MODEL".to_string()
                    } else {
                        format!(
                            "pick one the server has with --model or PMM_MODEL: {}",
                            some.join(", ")
                        )
                    };
                    Err(p.fail(
                        &one,
                        format!("model '{model}' not found ({})", p.status(404, &b)),
                        hint,
                    ))
                }
                _ => Ok(()),
            }
        }
        Got::Answer(404, body) if !base.ends_with("/v1") => {
            match p.get(&format!("{base}/v1/models")) {
                Got::Answer(200, b) if model_list(&b).is_some() => Err(p.fail(
                    &url,
                    p.status(404, &body),
                    format!(
                        "OPENAI_BASE_URL must include /v1: OPENAI_BASE_URL={}/v1",
                        shown_url(base)
                    ),
                )),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}
