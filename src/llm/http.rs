//! The HTTP client the ollama and openai adapters share: one JSON POST with a per-attempt
//! timeout, retries with exponential backoff, and errors that name the URL but never a secret.
//! A streamed answer is read line by line; both kinds of request can be cancelled (the request
//! then runs on a worker thread that is abandoned when the flag is raised, and the connection
//! is closed as soon as that thread notices).
//!
//! A reply has one deadline and one size bound whichever way it comes: the whole answer within
//! the timeout of the attempt that gave it, and at most [`MAX_REPLY`] bytes of reply (a whole
//! body is refused past that size; a streamed one is ended there, and at the deadline, however
//! fast and however long the server keeps sending).

use super::cancel::POLL;
use super::scrub::Secrets;
use super::{millis, Cancel, Config, LlmError};
use serde_json::Value;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest body excerpt an error carries, in characters.
const MAX_EXCERPT: usize = 200;
/// Longest wait between two attempts, whatever the backoff or `Retry-After` say: a turn is
/// interactive, and a server that wants more should be reported rather than waited for.
const MAX_DELAY: Duration = Duration::from_secs(30);
/// Longest wait for a TCP connection: a host that drops SYNs should fail (and be retried) long
/// before a model that is busy generating.
const MAX_CONNECT: Duration = Duration::from_secs(10);

/// Longest line of a streamed answer (one chunk of ndjson, one server-sent event line).
const MAX_STREAM_LINE: u64 = 10 * 1024 * 1024;

/// Most bytes of reply an answer may bring: ureq's limit for a whole body, and so what a
/// streamed reply may add up to.
pub(crate) const MAX_REPLY: usize = 10 * 1024 * 1024;

/// Lines of a streamed answer read ahead of the adapter: the reading thread waits when it is
/// this far ahead, so that a server faster than the adapter fills no memory.
const STREAM_QUEUE: usize = 64;

/// A JSON-over-HTTP client for one provider.
#[derive(Clone)]
pub(crate) struct Http {
    agent: ureq::Agent,
    provider: &'static str,
    /// Scrubbed from everything the server sends back before it can reach a reply or an
    /// error.
    secrets: Secrets,
    timeout: Duration,
    retries: u32,
    backoff: Duration,
}

/// A successful answer.
pub(crate) struct Answer {
    /// The response body.
    pub json: Value,
    /// Wall time of the attempt that succeeded.
    pub latency_ms: u64,
    /// 1 + retries used.
    pub attempts: u32,
}

/// Why one attempt failed, before it is known whether it is the last.
enum Failure {
    /// No connection, or the connection dropped before an answer: retried.
    Connect(String),
    /// An HTTP error status: retried when 429 or 5xx.
    Status {
        code: u16,
        excerpt: String,
        retry_after: Option<Duration>,
    },
    /// The per-attempt timeout ran out: not retried (see the module docs).
    Timeout,
    /// An answer that is not what the protocol promises.
    Bad(String),
    /// A request that cannot be made at all (bad URL, proxy setup).
    Config(String),
}

/// 429 (rate limited) and 5xx (server trouble) may pass on a later attempt; other statuses
/// will not.
pub(crate) fn retryable_status(code: u16) -> bool {
    code == 429 || (500..600).contains(&code)
}

impl Http {
    /// A client for `provider` with `cfg`'s timeout and retry policy; `secrets` are scrubbed
    /// from its answers and errors.
    pub(crate) fn new(provider: &'static str, cfg: &Config, secrets: Secrets) -> Http {
        let agent = ureq::AgentBuilder::new()
            .timeout(cfg.timeout)
            .timeout_connect(cfg.timeout.min(MAX_CONNECT))
            .user_agent(concat!("pmm/", env!("CARGO_PKG_VERSION")))
            // A followed redirect turns the POST into a GET and fails somewhere confusing;
            // reporting where it points tells the user which URL to configure.
            .redirects(0)
            .build();
        Http {
            agent,
            provider,
            secrets,
            timeout: cfg.timeout,
            retries: cfg.retries,
            backoff: cfg.backoff,
        }
    }

    /// POSTs `body` to `url` (with `Authorization: Bearer <bearer>` when given) and returns the
    /// JSON answer, retrying connection errors, 429 and 5xx.
    pub(crate) fn post_json(
        &self,
        url: &str,
        body: &Value,
        bearer: Option<&str>,
    ) -> Result<Answer, LlmError> {
        let payload = body.to_string();
        let auth = bearer.map(|k| format!("Bearer {k}"));
        let (json, latency_ms, attempts) = self
            .with_retries(url, |started| {
                let response = self.send(url, &payload, auth.as_deref(), "application/json")?;
                read_json(response).map(|json| (json, millis(started.elapsed())))
            })
            .map(|((json, latency), attempts)| (json, latency, attempts))?;
        Ok(Answer {
            // A secret, echoed back, must reach no reply, meta or ledger.
            json: self.secrets.value(json),
            latency_ms,
            attempts,
        })
    }

    /// [`Http::post_json`], given up with [`LlmError::Interrupted`] as soon as `cancel` is
    /// raised: the request runs on a worker thread, abandoned then (it ends, and closes its
    /// connection, when the server answers or the timeout runs out).
    pub(crate) fn post_json_cancellable(
        &self,
        url: &str,
        body: &Value,
        bearer: Option<&str>,
        cancel: Option<&Cancel>,
    ) -> Result<Answer, LlmError> {
        let Some(cancel) = cancel else {
            return self.post_json(url, body, bearer);
        };
        cancel.check(self.provider, &shown_url(url))?;
        let (tx, rx) = mpsc::channel();
        let (http, url_owned, body, bearer) = (
            self.clone(),
            url.to_string(),
            body.clone(),
            bearer.map(str::to_string),
        );
        std::thread::spawn(move || {
            let _ = tx.send(http.post_json(&url_owned, &body, bearer.as_deref()));
        });
        loop {
            cancel.check(self.provider, &shown_url(url))?;
            match rx.recv_timeout(POLL) {
                Ok(result) => return result,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(self.bad_response(url, "the request thread stopped"))
                }
            }
        }
    }

    /// POSTs `body` to `url` and reads the answer as a stream of lines, handing each to
    /// `on_event` as it arrives (then [`StreamEvent::End`] when the body ends). Connection
    /// errors, 429 and 5xx before the answer starts are retried as for [`Http::post_json`];
    /// nothing is retried once it has started. `on_event` says when the reply is complete
    /// ([`Flow::Done`]: the rest of the body is not waited for) or that it is unusable
    /// (`Err`: a [`LlmError::BadResponse`]); a body that ends before `Done` is a bad response
    /// too. A raised `cancel` gives up at once with [`LlmError::Interrupted`]; a reply not
    /// complete within the timeout of the attempt that started it is a [`LlmError::Timeout`],
    /// however much of it keeps coming.
    pub(crate) fn post_stream(
        &self,
        url: &str,
        body: &Value,
        bearer: Option<&str>,
        cancel: Option<&Cancel>,
        mut on_event: impl FnMut(StreamEvent<'_>) -> Result<Flow, StreamError>,
    ) -> Result<Streamed, LlmError> {
        let endpoint = shown_url(url);
        let check = || match cancel {
            Some(c) => c.check(self.provider, &endpoint),
            None => Ok(()),
        };
        check()?;
        let started = Instant::now();
        let (tx, rx) = mpsc::sync_channel::<Piece>(STREAM_QUEUE);
        {
            let (http, url, payload) = (self.clone(), url.to_string(), body.to_string());
            let auth = bearer.map(|k| format!("Bearer {k}"));
            std::thread::spawn(move || http.stream_worker(&url, &payload, auth.as_deref(), &tx));
        }
        let mut attempts = 1;
        // Set when the answer starts: the timeout counts from the start of its attempt (ureq
        // bounds the attempts before it, and each read, but not a reply that keeps coming).
        let mut deadline: Option<Instant> = None;
        let mut scrubbed;
        let failed = loop {
            check()?;
            let wait = match deadline {
                Some(d) if Instant::now() >= d => break Piece::Failed(Failure::Timeout),
                Some(d) => d.saturating_duration_since(Instant::now()).min(POLL),
                None => POLL,
            };
            let piece = match rx.recv_timeout(wait) {
                Ok(p) => p,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(self.bad_response(url, "the request thread stopped"))
                }
            };
            let event = match &piece {
                Piece::Started(n, at) => {
                    attempts = *n;
                    deadline = Some(*at + self.timeout);
                    continue;
                }
                Piece::Line(line) => {
                    // A secret, echoed back, must reach neither the terminal nor the ledger.
                    scrubbed = self.secrets.text(line);
                    StreamEvent::Line(&scrubbed)
                }
                Piece::End => StreamEvent::End,
                Piece::Error(_) | Piece::Failed(_) => break piece,
            };
            let end = matches!(event, StreamEvent::End);
            match on_event(event) {
                Ok(Flow::Done) => {
                    return Ok(Streamed {
                        latency_ms: millis(started.elapsed()),
                        attempts,
                    })
                }
                Ok(Flow::More) if end => {
                    return Err(
                        self.bad_response(url, "the stream ended before the reply was complete")
                    )
                }
                Ok(Flow::More) => {}
                Err(e) => return Err(self.bad_response(url, e.to_string())),
            }
        };
        Err(match failed {
            Piece::Failed(f) => self.error(url, f, attempts),
            Piece::Error(e) => e,
            _ => self.bad_response(url, "the stream stopped"),
        })
    }

    /// The worker thread of [`Http::post_stream`]: connects (with retries), then sends the
    /// body's lines as they come. It stops as soon as nobody receives any more, dropping (and
    /// so closing) the connection.
    fn stream_worker(
        &self,
        url: &str,
        payload: &str,
        auth: Option<&str>,
        tx: &mpsc::SyncSender<Piece>,
    ) {
        let accept = "application/x-ndjson, text/event-stream, application/json";
        let response = match self.with_retries(url, |started| {
            let response = self.send(url, payload, auth, accept)?;
            refuse_redirect(&response)?;
            Ok((response, started))
        }) {
            Ok(((response, started), attempts)) => {
                if tx.send(Piece::Started(attempts, started)).is_err() {
                    return;
                }
                response
            }
            Err(e) => {
                let _ = tx.send(Piece::Error(e));
                return;
            }
        };
        let mut reader = BufReader::new(response.into_reader());
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let piece = match (&mut reader)
                .take(MAX_STREAM_LINE)
                .read_until(b'\n', &mut buf)
            {
                Ok(0) => Piece::End,
                Ok(n) if n as u64 == MAX_STREAM_LINE && !buf.ends_with(b"\n") => Piece::Failed(
                    Failure::Bad("a line of the streamed answer is longer than 10 MB".into()),
                ),
                Ok(_) => match String::from_utf8(std::mem::take(&mut buf)) {
                    Ok(line) => Piece::Line(line),
                    Err(_) => Piece::Failed(Failure::Bad("the stream is not UTF-8".into())),
                },
                Err(e) => Piece::Failed(match e.kind() {
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Failure::Timeout,
                    _ => Failure::Connect(format!(
                        "the connection closed before the reply was complete ({e})"
                    )),
                }),
            };
            let last = !matches!(piece, Piece::Line(_));
            if tx.send(piece).is_err() || last {
                return;
            }
        }
    }

    /// One POST, its status checked.
    fn send(
        &self,
        url: &str,
        payload: &str,
        auth: Option<&str>,
        accept: &str,
    ) -> Result<ureq::Response, Failure> {
        let mut request = self
            .agent
            .post(url)
            .set("Content-Type", "application/json")
            .set("Accept", accept);
        if let Some(auth) = auth {
            request = request.set("Authorization", auth);
        }
        match request.send_string(payload) {
            Ok(response) => Ok(response),
            Err(ureq::Error::Status(code, response)) => Err(Failure::Status {
                code,
                retry_after: retry_after(&response),
                excerpt: excerpt(&response.into_string().unwrap_or_default(), &self.secrets),
            }),
            Err(ureq::Error::Transport(t)) => Err(classify(&t)),
        }
    }

    /// Runs `attempt` (given when it started) until it succeeds, retrying connection errors,
    /// 429 and 5xx with backoff; returns what it gave and the attempts made.
    fn with_retries<T>(
        &self,
        url: &str,
        mut attempt: impl FnMut(Instant) -> Result<T, Failure>,
    ) -> Result<(T, u32), LlmError> {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let failure = match attempt(Instant::now()) {
                Ok(t) => return Ok((t, attempts)),
                Err(f) => f,
            };
            let delay = match &failure {
                Failure::Connect(_) => Some(None),
                Failure::Status {
                    code, retry_after, ..
                } if retryable_status(*code) => Some(*retry_after),
                _ => None,
            };
            match delay {
                Some(server_wish) if attempts <= self.retries => {
                    std::thread::sleep(self.delay(attempts, server_wish));
                }
                _ => return Err(self.error(url, failure, attempts)),
            }
        }
    }

    /// Wait before attempt `attempts + 1`: the backoff doubled per retry already made, or the
    /// server's `Retry-After` when longer, never more than [`MAX_DELAY`].
    fn delay(&self, attempts: u32, server_wish: Option<Duration>) -> Duration {
        let factor = 1u32 << (attempts - 1).min(16);
        let ours = self.backoff.saturating_mul(factor);
        ours.max(server_wish.unwrap_or_default()).min(MAX_DELAY)
    }

    /// The error for the last attempt's failure.
    fn error(&self, url: &str, failure: Failure, attempts: u32) -> LlmError {
        let provider = self.provider.to_string();
        let endpoint = shown_url(url);
        let scrub = |s: String| self.secrets.redact(&s);
        match failure {
            Failure::Connect(detail) => LlmError::Unreachable {
                provider,
                endpoint,
                detail: scrub(detail),
                attempts,
            },
            Failure::Status { code, excerpt, .. } => LlmError::Status {
                provider,
                endpoint,
                code,
                body_excerpt: excerpt,
                attempts,
            },
            Failure::Timeout => LlmError::Timeout {
                provider,
                endpoint,
                timeout: self.timeout,
                attempts,
            },
            Failure::Bad(detail) => LlmError::BadResponse {
                provider,
                endpoint,
                detail: scrub(detail),
            },
            Failure::Config(detail) => {
                LlmError::Config(format!("{provider} at {endpoint}: {}", scrub(detail)))
            }
        }
    }

    /// A [`LlmError::BadResponse`] for an answer the adapter could not use.
    pub(crate) fn bad_response(&self, url: &str, detail: impl Into<String>) -> LlmError {
        LlmError::BadResponse {
            provider: self.provider.to_string(),
            endpoint: shown_url(url),
            detail: self.secrets.redact(&detail.into()),
        }
    }
}

/// What a streamed answer hands its reader.
pub(crate) enum StreamEvent<'a> {
    /// One line, with its line ending.
    Line(&'a str),
    /// The body ended.
    End,
}

/// Why a streamed answer is unusable: it becomes a [`LlmError::BadResponse`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamError {
    /// A line (Ollama) or an event's data (OpenAI) that is not JSON.
    #[error("{what} of the stream is not JSON ({source})")]
    NotJson {
        /// `a line`, `an event`.
        what: &'static str,
        /// Why it does not parse.
        source: serde_json::Error,
    },
    /// The server put an error into the stream.
    #[error("error: {0}")]
    Server(String),
    /// The reply grew past [`MAX_REPLY`] (a whole body that size is refused too).
    #[error("the reply is larger than {} MB", MAX_REPLY / 1024 / 1024)]
    TooBig,
}

/// Whether a streamed reply is complete.
pub(crate) enum Flow {
    /// Keep reading.
    More,
    /// The reply is complete.
    Done,
}

/// A streamed answer that completed.
pub(crate) struct Streamed {
    /// Wall time from the first attempt to the end of the reply.
    pub latency_ms: u64,
    /// 1 + retries used.
    pub attempts: u32,
}

/// What the worker thread of a streamed request passes on.
enum Piece {
    /// The answer started, after this many attempts, the last of which started then.
    Started(u32, Instant),
    /// One line of it.
    Line(String),
    /// The body ended.
    End,
    /// Reading it failed.
    Failed(Failure),
    /// No answer (after retries).
    Error(LlmError),
}

/// A redirect is reported, not followed (see [`Http::new`]).
fn refuse_redirect(response: &ureq::Response) -> Result<(), Failure> {
    if (300..400).contains(&response.status()) {
        let target = response.header("Location").map(shown_url);
        return Err(Failure::Bad(format!(
            "HTTP {} redirect to {} (configure that URL instead)",
            response.status(),
            target.as_deref().unwrap_or("nowhere")
        )));
    }
    Ok(())
}

/// The body of a successful response as JSON.
fn read_json(response: ureq::Response) -> Result<Value, Failure> {
    refuse_redirect(&response)?;
    let text = response.into_string().map_err(|e| match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Failure::Timeout,
        io::ErrorKind::InvalidData => {
            Failure::Bad("the body is not UTF-8 or is larger than 10 MB".into())
        }
        _ => Failure::Connect(format!("connection lost while reading the answer ({e})")),
    })?;
    serde_json::from_str(&text).map_err(|e| Failure::Bad(format!("the body is not JSON ({e})")))
}

/// Sorts a transport error into what the retry loop and the user need to know.
fn classify(t: &ureq::Transport) -> Failure {
    use ureq::ErrorKind as K;
    let io = io_cause(t);
    let timed_out = io.is_some_and(|e| {
        matches!(
            e.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        )
    });
    match t.kind() {
        K::InvalidUrl | K::UnknownScheme | K::InsecureRequestHttpsOnly | K::InvalidProxyUrl => {
            Failure::Config(t.message().unwrap_or("bad URL").to_string())
        }
        K::ProxyUnauthorized => Failure::Config("the proxy refused its credentials".into()),
        K::Dns => Failure::Connect("cannot resolve the host".into()),
        K::ConnectionFailed | K::ProxyConnect => Failure::Connect(match io {
            _ if timed_out => "connection timed out".into(),
            Some(e) if e.kind() == io::ErrorKind::ConnectionRefused => "connection refused".into(),
            Some(e) => format!("cannot connect ({e})"),
            None => format!("cannot connect ({})", t.message().unwrap_or("no detail")),
        }),
        K::Io if timed_out => Failure::Timeout,
        K::Io => Failure::Connect(match io.map(io::Error::kind) {
            Some(
                io::ErrorKind::ConnectionAborted
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::UnexpectedEof
                | io::ErrorKind::BrokenPipe,
            ) => "connection closed without an answer".into(),
            _ => format!(
                "network error ({})",
                io.map(ToString::to_string)
                    .or_else(|| t.message().map(str::to_string))
                    .unwrap_or_else(|| "no detail".into())
            ),
        }),
        K::BadStatus | K::BadHeader => Failure::Bad(format!(
            "not an HTTP answer ({})",
            t.message().unwrap_or("malformed")
        )),
        K::TooManyRedirects => Failure::Bad("too many redirects".into()),
        K::HTTP => Failure::Bad("unexpected HTTP error".into()),
    }
}

/// The first `io::Error` in `t`'s cause chain: it says whether the failure was a timeout, a
/// refusal or a reset.
fn io_cause(t: &ureq::Transport) -> Option<&io::Error> {
    let mut cause = std::error::Error::source(t);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io);
        }
        cause = e.source();
    }
    None
}

/// Seconds asked for by a `Retry-After` header (the HTTP-date form is ignored).
fn retry_after(response: &ureq::Response) -> Option<Duration> {
    response
        .header("Retry-After")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// What of an error body goes into an error: the error message when the body is a JSON error
/// object (`{"error":"..."}` from ollama, `{"error":{"message":"..."}}` from OpenAI), else the
/// body; on one line, at most [`MAX_EXCERPT`] characters, every secret replaced by `***`.
pub(crate) fn excerpt(body: &str, secrets: &Secrets) -> String {
    let message = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| error_message(&v));
    // Redact before cutting, or a key straddling the cut would leave a prefix behind.
    let text = secrets.redact(message.as_deref().unwrap_or(body));
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(MAX_EXCERPT) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

/// The message of a JSON error body, in the shapes ollama and OpenAI-compatible servers use.
fn error_message(v: &Value) -> Option<String> {
    match v.get("error")? {
        Value::String(s) => Some(s.clone()),
        e => e.get("message").and_then(Value::as_str).map(str::to_string),
    }
}

/// `url` fit for an error: without `user:password@`, query or fragment (where credentials
/// hide).
pub(crate) fn shown_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = authority.rsplit('@').next().unwrap_or(authority);
    format!("{scheme}://{host}{path}")
}

/// `raw` checked to be an http(s) URL with a host, with trailing slashes removed so that a
/// path can be appended; `what` names the setting in the error.
pub(crate) fn base_url(provider: &str, what: &str, raw: &str) -> Result<String, LlmError> {
    let url = raw.trim().trim_end_matches('/');
    let host = url
        .split_once("://")
        .filter(|(scheme, _)| {
            scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
        })
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or_default());
    match host {
        Some(h) if !h.rsplit('@').next().unwrap_or_default().is_empty() => Ok(url.to_string()),
        _ => Err(LlmError::Config(format!(
            "{provider}: {what} '{}' is not an http:// or https:// URL",
            shown_url(url)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_urls_drop_credentials_and_queries() {
        assert_eq!(
            shown_url("https://user:sk-1@example.com:8443/v1/chat/completions?key=sk-1#x"),
            "https://example.com:8443/v1/chat/completions"
        );
        assert_eq!(
            shown_url("http://127.0.0.1:11434/api/chat"),
            "http://127.0.0.1:11434/api/chat"
        );
        // An `@` in the path is not userinfo.
        assert_eq!(shown_url("http://h/a@b"), "http://h/a@b");
    }

    #[test]
    fn excerpts_are_short_single_lines_without_the_secret() {
        let mut key = Secrets::none();
        key.bearer("sk-secret");
        let body = format!("line one\n\tsk-secret line two {}", "x".repeat(500));
        let e = excerpt(&body, &key);
        assert!(!e.contains("sk-secret") && e.contains("***"), "{e}");
        assert!(!e.contains('\n') && !e.contains('\t'));
        assert_eq!(e.chars().count(), MAX_EXCERPT + 1); // the cut is marked with an ellipsis
        assert_eq!(
            excerpt(
                r#"{"error":{"message":"bad key sk-secret","type":"x"}}"#,
                &key
            ),
            "bad key ***"
        );
        assert_eq!(
            excerpt(r#"{"error":"model not found"}"#, &Secrets::none()),
            "model not found"
        );
        assert_eq!(excerpt("", &Secrets::none()), "");
    }

    #[test]
    fn retry_delays_double_and_are_capped() {
        let mut cfg = Config::new(crate::llm::AdapterKind::Ollama);
        cfg.backoff = Duration::from_millis(500);
        let http = Http::new("ollama", &cfg, Secrets::none());
        assert_eq!(http.delay(1, None), Duration::from_millis(500));
        assert_eq!(http.delay(2, None), Duration::from_millis(1000));
        assert_eq!(http.delay(3, None), Duration::from_millis(2000));
        assert_eq!(
            http.delay(1, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(http.delay(40, None), MAX_DELAY);
        assert_eq!(http.delay(1, Some(Duration::from_secs(3600))), MAX_DELAY);
    }

    #[test]
    fn base_urls_must_be_http() {
        assert_eq!(
            base_url("openai", "base URL", "http://localhost:8080/v1/").unwrap(),
            "http://localhost:8080/v1"
        );
        for bad in ["localhost:8080", "ftp://x", "http://", ""] {
            let e = base_url("openai", "base URL", bad).unwrap_err();
            assert!(e.is_config(), "{bad}: {e}");
        }
        let e = base_url("openai", "base URL", "htp://u:sk-9@h").unwrap_err();
        assert!(!e.to_string().contains("sk-9"), "{e}");
    }
}
