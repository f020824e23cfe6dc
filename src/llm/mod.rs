//! Model adapters: the only network code in pmm.
//!
//! A turn hands an [`Adapter`] a [`Request`] (system prompt, user message, sampling parameters)
//! and gets a [`Reply`] back (the text, the model that answered, the provider's token counts,
//! latency and attempts). [`adapter`] builds one from a [`Config`], checking the setup first so
//! that a bad configuration is reported before anything is asked of a model.
//!
//! Providers, one file each:
//! - `ollama`: `POST {host}/api/chat`, non-streaming, or streamed as newline-delimited JSON.
//! - `openai`: `POST {base_url}/chat/completions`, any OpenAI-compatible server (OpenAI,
//!   llama.cpp, vLLM, LM Studio); streamed as server-sent events.
//! - `cmd`: runs `sh -c <command>`, the request as one JSON object on its stdin, the reply on its
//!   stdout.
//! - `scripted`: replies from a JSONL file, one per turn, for demos and tests.
//! - `dummy`: the reference's echo reply.
//!
//! Failures: the HTTP adapters retry connection errors, HTTP 429 and 5xx with exponential
//! backoff ([`Config::retries`], [`Config::backoff`]). A timeout is not retried: a model that did
//! not answer within [`Config::timeout`] is most likely busy with a long generation, and asking
//! again would only multiply the wait. A reply, streamed or whole, is bounded by the timeout and
//! by 10 MB. Secrets (the API key, a URL's credentials, for `cmd` the environment's keys) never
//! appear in errors, replies, `Debug` output or shown URLs (see `scrub`).
//!
//! Streaming and cancelling: [`Adapter::generate_with`] hands the reply to a [`TextSink`] as it
//! is generated (the HTTP adapters then ask for a streamed answer) and gives up with
//! [`LlmError::Interrupted`] as soon as a [`Cancel`] flag is raised (Ctrl-C, SIGTERM).

mod cancel;
mod cmd;
mod dummy;
pub mod embed;
mod http;
mod ollama;
mod openai;
mod preflight;
mod scripted;
mod scrub;

pub use cancel::{Armed, Cancel, TextSink};

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// What the turn asks of a model.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The full system prompt (context block and rules), sent as the system message.
    pub system: String,
    /// The user's message, verbatim.
    pub user: String,
    /// The newest exchanges of the conversation before this message, oldest first, as
    /// `(role, content)` with role `user` or `assistant`: sent as chat messages between the
    /// system prompt and the user's message, so the model always sees what was just said.
    pub history: Vec<(String, String)>,
    /// Sampling temperature; pmm asks for 0 so that replies are as repeatable as the model allows.
    pub temperature: f64,
    /// Nucleus sampling; 1 disables it.
    pub top_p: f64,
    /// A sampling seed, sent only when given.
    pub seed: Option<u64>,
    /// The most tokens the reply may have (`num_predict` to Ollama, `max_tokens` to OpenAI),
    /// sent only when given; without it the server's own limit applies.
    pub max_tokens: Option<u32>,
    /// 1-based number of this turn in the ledger (the scripted adapter picks its reply by it).
    pub turn: u64,
}

impl Default for Request {
    /// An empty first turn with pmm's sampling defaults: temperature 0, top_p 1, no seed, no
    /// token limit.
    fn default() -> Self {
        Request {
            system: String::new(),
            user: String::new(),
            history: Vec::new(),
            temperature: 0.0,
            top_p: 1.0,
            seed: None,
            max_tokens: None,
            turn: 1,
        }
    }
}

impl Request {
    /// The chat messages every provider is sent: the system prompt, the recent history, then
    /// the user's message.
    pub fn messages(&self) -> serde_json::Value {
        let mut m = vec![serde_json::json!({"role": "system", "content": self.system})];
        for (role, content) in &self.history {
            m.push(serde_json::json!({"role": role, "content": content}));
        }
        m.push(serde_json::json!({"role": "user", "content": self.user}));
        serde_json::Value::Array(m)
    }
}

/// What came back.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The reply, unmodified (the cmd adapter drops its program's final line ending).
    pub text: String,
    /// The model that answered: the provider's reported name if it gives one, else the
    /// configured one.
    pub model: String,
    /// Prompt tokens as the provider counted them (ollama `prompt_eval_count`, openai
    /// `usage.prompt_tokens`).
    pub in_tokens: Option<u64>,
    /// Completion tokens as the provider counted them (ollama `eval_count`, openai
    /// `usage.completion_tokens`).
    pub out_tokens: Option<u64>,
    /// Wall time of the successful attempt; 0 for dummy and scripted, which must be
    /// deterministic.
    pub latency_ms: u64,
    /// 1 + the retries used.
    pub attempts: u32,
    /// Why the model stopped, as the provider said it (Ollama `done_reason`, OpenAI
    /// `choices[0].finish_reason`): "stop", or "length" for a reply cut by the token limit.
    /// `None` when the provider did not say (cmd, scripted, dummy).
    pub finish_reason: Option<String>,
}

impl Reply {
    /// True when the provider says the reply was cut by a token limit (`--max-tokens` or the
    /// server's own): it is kept as it came, and shown with `[truncated]`.
    pub fn truncated(&self) -> bool {
        self.finish_reason.as_deref().is_some_and(is_truncation)
    }
}

pub use crate::formats::reply::is_truncation;

/// Which provider answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AdapterKind {
    /// A local or remote Ollama server (`/api/chat`).
    Ollama,
    /// Any OpenAI-compatible Chat Completions server.
    Openai,
    /// A program run per turn: prompt JSON on stdin, reply on stdout.
    Cmd,
    /// Replies read from a file, one per turn.
    Scripted,
    /// The reference's echo reply.
    Dummy,
}

impl AdapterKind {
    /// Every kind, in the order help text lists them.
    pub const ALL: [AdapterKind; 5] = [
        AdapterKind::Ollama,
        AdapterKind::Openai,
        AdapterKind::Cmd,
        AdapterKind::Scripted,
        AdapterKind::Dummy,
    ];

    /// The name used on the command line, in `$PMM_ADAPTER` and in the ledger's `provider`.
    pub fn as_str(self) -> &'static str {
        match self {
            AdapterKind::Ollama => "ollama",
            AdapterKind::Openai => "openai",
            AdapterKind::Cmd => "cmd",
            AdapterKind::Scripted => "scripted",
            AdapterKind::Dummy => "dummy",
        }
    }

    /// The model asked for when none is configured ("" for the kinds without models).
    pub fn default_model(self) -> &'static str {
        match self {
            AdapterKind::Ollama => "llama3.2",
            AdapterKind::Openai => "gpt-4o-mini",
            AdapterKind::Cmd | AdapterKind::Scripted | AdapterKind::Dummy => "",
        }
    }
}

impl fmt::Display for AdapterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AdapterKind {
    type Err = LlmError;

    /// Parses a kind's name exactly as [`AdapterKind::as_str`] spells it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AdapterKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = AdapterKind::ALL.iter().map(|k| k.as_str()).collect();
                LlmError::Config(format!(
                    "unknown adapter '{s}' (expected one of: {})",
                    names.join(", ")
                ))
            })
    }
}

/// Default Ollama server.
pub const DEFAULT_OLLAMA_HOST: &str = "http://127.0.0.1:11434";
/// Default OpenAI-compatible base URL.
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// How to reach a model. Build with [`Config::new`] (defaults only) or [`Config::from_env`]
/// (defaults overridden by the environment), then adjust fields.
#[derive(Clone, PartialEq)]
pub struct Config {
    /// The provider.
    pub kind: AdapterKind,
    /// The model to ask for; `None` means the kind's [`AdapterKind::default_model`].
    pub model: Option<String>,
    /// Limit on each attempt (connection, request and the whole reply); default 120 s.
    pub timeout: Duration,
    /// Retries after the first attempt for transient HTTP failures; default 2.
    pub retries: u32,
    /// Delay before the first retry, doubling for each further one; default 500 ms.
    pub backoff: Duration,
    /// Ollama server, a URL or a bare `host[:port]` (`$OLLAMA_HOST`).
    pub ollama_host: String,
    /// OpenAI-compatible base URL, up to and including `/v1` (`$OPENAI_BASE_URL`).
    pub openai_base_url: String,
    /// Bearer token (`$OPENAI_API_KEY`); absent for local servers, which then get no
    /// `Authorization` header. Never shown: `Debug` redacts it and errors scrub it.
    pub openai_api_key: Option<String>,
    /// The cmd adapter's command line, run with `sh -c` so that quoting, pipes and `$VARS`
    /// work as in a shell.
    pub command: Option<String>,
    /// The scripted adapter's replies file.
    pub script: Option<PathBuf>,
}

impl Config {
    /// Defaults only, ignoring the environment (what tests want).
    pub fn new(kind: AdapterKind) -> Config {
        Config {
            kind,
            model: None,
            timeout: Duration::from_secs(120),
            retries: 2,
            backoff: Duration::from_millis(500),
            ollama_host: DEFAULT_OLLAMA_HOST.to_string(),
            openai_base_url: DEFAULT_OPENAI_BASE_URL.to_string(),
            openai_api_key: None,
            command: None,
            script: None,
        }
    }

    /// Defaults overridden by the process environment: `$PMM_MODEL`, `$OLLAMA_HOST`,
    /// `$OPENAI_BASE_URL`, `$OPENAI_API_KEY`, and the reference's names where they mean the
    /// same: the model from `$PMM_OPENAI_MODEL` or `$OPENAI_MODEL` (openai) or
    /// `$PMM_OLLAMA_MODEL` (ollama) when `$PMM_MODEL` is unset, the Ollama server from
    /// `$OLLAMA_BASE_URL` when `$OLLAMA_HOST` is unset. An empty variable counts as unset (a `.env` line
    /// `OPENAI_API_KEY=` must not send an empty bearer token). `.env` files are the CLI's
    /// business, loaded before this is called.
    pub fn from_env(kind: AdapterKind) -> Config {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut cfg = Config::new(kind);
        let reference_model = match kind {
            AdapterKind::Openai => var("PMM_OPENAI_MODEL").or_else(|| var("OPENAI_MODEL")),
            AdapterKind::Ollama => var("PMM_OLLAMA_MODEL"),
            _ => None,
        };
        cfg.model = var("PMM_MODEL").or(reference_model);
        if let Some(host) = var("OLLAMA_HOST").or_else(|| var("OLLAMA_BASE_URL")) {
            cfg.ollama_host = host;
        }
        if let Some(url) = var("OPENAI_BASE_URL") {
            cfg.openai_base_url = url;
        }
        cfg.openai_api_key = var("OPENAI_API_KEY");
        cfg
    }

    /// The model asked for: the configured one, else the kind's default.
    pub fn model_name(&self) -> &str {
        self.model
            .as_deref()
            .unwrap_or_else(|| self.kind.default_model())
    }
}

impl fmt::Debug for Config {
    // By hand so that the API key never reaches a log or a panic message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("kind", &self.kind)
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("backoff", &self.backoff)
            .field("ollama_host", &self.ollama_host)
            .field("openai_base_url", &self.openai_base_url)
            .field(
                "openai_api_key",
                &self.openai_api_key.as_ref().map(|_| "***"),
            )
            .field("command", &self.command)
            .field("script", &self.script)
            .finish()
    }
}

/// A model provider. `Send` so that an interactive session can keep it on a worker thread.
pub trait Adapter: Send {
    /// The provider's name: "ollama", "openai", "cmd", "scripted" or "dummy".
    fn provider(&self) -> &str;
    /// The configured model name ("" when none).
    fn model(&self) -> &str;
    /// Where it asks: the URL (without credentials), the cmd program or the script; "" for
    /// the dummy adapter.
    fn endpoint(&self) -> String {
        String::new()
    }
    /// Asks the model for one reply.
    fn generate(&mut self, req: &Request) -> Result<Reply, LlmError>;
    /// A cheap check, before anything is written, that the model can be asked at all: the
    /// server answers, knows the model and accepts the key (ollama `POST /api/show`, openai
    /// `GET /models`). [`LlmError::Preflight`] when it cannot; a server that answers the check
    /// in a way that proves nothing (a 5xx, a timeout) passes, and the turn finds out. The
    /// default, for adapters without a server, passes.
    fn preflight(&mut self) -> Result<(), LlmError> {
        Ok(())
    }

    /// Asks the model for one reply, handing it to `sink` as it is generated when a sink is
    /// given (the HTTP adapters then ask for a streamed answer; the others hand over the whole
    /// reply at once), and giving up with [`LlmError::Interrupted`] once `cancel` is raised.
    /// Without a sink and a flag this is [`Adapter::generate`].
    fn generate_with(
        &mut self,
        req: &Request,
        sink: Option<&TextSink>,
        cancel: Option<&Cancel>,
    ) -> Result<Reply, LlmError> {
        if let Some(c) = cancel {
            c.check(self.provider(), &self.endpoint())?;
        }
        let reply = self.generate(req)?;
        if let Some(c) = cancel {
            c.check(self.provider(), &self.endpoint())?;
        }
        if let Some(sink) = sink {
            sink.send(&reply.text);
        }
        Ok(reply)
    }
}

/// Builds the adapter `cfg` describes, after checking it: a missing command or script, an
/// unreadable or malformed script, a URL that is not http(s), a zero timeout are
/// [`LlmError::Config`]. Nothing is sent anywhere yet.
pub fn adapter(cfg: &Config) -> Result<Box<dyn Adapter>, LlmError> {
    if cfg.timeout.is_zero() {
        return Err(LlmError::Config(
            "the model timeout must be positive".into(),
        ));
    }
    Ok(match cfg.kind {
        AdapterKind::Ollama => Box::new(ollama::Ollama::new(cfg)?),
        AdapterKind::Openai => Box::new(openai::OpenAi::new(cfg)?),
        AdapterKind::Cmd => Box::new(cmd::Cmd::new(cfg)?),
        AdapterKind::Scripted => Box::new(scripted::Scripted::new(cfg)?),
        AdapterKind::Dummy => Box::new(dummy::Dummy::new(cfg)),
    })
}

/// Everything that can go wrong asking a model. Every message is one line naming the provider
/// and where it was asked (a URL without credentials, or the program), and never contains the
/// API key.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// A bad setup, found before anything was sent (exit 2 upstream).
    #[error("{0}")]
    Config(String),
    /// The server could not be reached, or dropped the connection without answering.
    #[error("{provider} at {endpoint}: {detail} after {attempts} attempt{}", plural(*attempts))]
    Unreachable {
        /// The provider's name.
        provider: String,
        /// The URL asked, without credentials.
        endpoint: String,
        /// What went wrong, e.g. "connection refused".
        detail: String,
        /// Attempts made.
        attempts: u32,
    },
    /// No answer within the per-attempt timeout (not retried; the cmd program is killed).
    #[error("{provider} at {endpoint}: no answer within {}{}", show_duration(*timeout), after(*attempts))]
    Timeout {
        /// The provider's name.
        provider: String,
        /// The URL asked, or the cmd program.
        endpoint: String,
        /// The limit that ran out.
        timeout: Duration,
        /// Attempts made (earlier ones failed for retryable reasons).
        attempts: u32,
    },
    /// The server answered with an HTTP error status.
    #[error("{provider} at {endpoint}: HTTP {code}{}{}{}", if body_excerpt.is_empty() { "" } else { ": " }, body_excerpt, after(*attempts))]
    Status {
        /// The provider's name.
        provider: String,
        /// The URL asked, without credentials.
        endpoint: String,
        /// The HTTP status.
        code: u16,
        /// The start of the body (or its error message) on one line, at most about 200
        /// characters, with the API key replaced by `***`.
        body_excerpt: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The server answered, but not with what the provider's protocol promises.
    #[error("{provider} at {endpoint}: unexpected response: {detail}")]
    BadResponse {
        /// The provider's name.
        provider: String,
        /// The URL asked, or the cmd program.
        endpoint: String,
        /// What is wrong with the answer.
        detail: String,
    },
    /// The cmd program could not be run or failed (not retried).
    #[error("cmd at {program}: {detail}")]
    Command {
        /// The program (the first word of the command line; its arguments may hold secrets).
        program: String,
        /// What happened, with the first line of its stderr when it failed.
        detail: String,
    },
    /// A check before the turn found that the model cannot be asked (the server refuses the
    /// connection, does not know the model, rejects the key): nothing was written (exit 3).
    #[error("{provider} at {endpoint}: {detail} (checked before the turn: nothing was written)")]
    Preflight {
        /// The provider's name.
        provider: String,
        /// The URL asked, without credentials.
        endpoint: String,
        /// What is wrong, then what to do about it (`model 'x' not found; pull it with …`),
        /// with the key scrubbed.
        detail: String,
    },
    /// The call was cancelled (Ctrl-C, SIGTERM: see [`Cancel`]) before the reply was complete.
    #[error("{provider}{}: interrupted by {}", if endpoint.is_empty() { String::new() } else { format!(" at {endpoint}") }, signal_name(*signal))]
    Interrupted {
        /// The provider's name.
        provider: String,
        /// The URL asked (without credentials), the cmd program, or "".
        endpoint: String,
        /// The signal that cancelled it (2 SIGINT, 15 SIGTERM).
        signal: i32,
    },
    /// The scripted adapter has no reply for this turn.
    #[error("scripted at {}: {replies} repl{} in the script, none for turn {turn}", path.display(), if *replies == 1 { "y" } else { "ies" })]
    ScriptExhausted {
        /// The script.
        path: PathBuf,
        /// The turn that asked.
        turn: u64,
        /// Replies the script holds.
        replies: usize,
    },
}

impl LlmError {
    /// True for failures that may pass if tried again later: connection errors, timeouts,
    /// HTTP 429 and 5xx. The HTTP adapters have already retried all of these except timeouts
    /// (see the module docs) before returning one.
    pub fn is_transient(&self) -> bool {
        match self {
            LlmError::Unreachable { .. } | LlmError::Timeout { .. } => true,
            LlmError::Status { code, .. } => http::retryable_status(*code),
            LlmError::Config(_)
            | LlmError::Preflight { .. }
            | LlmError::BadResponse { .. }
            | LlmError::Command { .. }
            | LlmError::Interrupted { .. }
            | LlmError::ScriptExhausted { .. } => false,
        }
    }

    /// Why the call failed, when it is not the service's fault: `interrupted` for a cancelled
    /// call (recorded as `reason` in the `generation_failure` meta).
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            LlmError::Interrupted { .. } => Some("interrupted"),
            _ => None,
        }
    }

    /// The exit status a program ending on this error should have: 128 + the signal for an
    /// interrupted call (130 for SIGINT, 143 for SIGTERM), else `None` (the usual 3).
    pub fn exit_status(&self) -> Option<u8> {
        match self {
            LlmError::Interrupted { signal, .. } => Some(
                u8::try_from(128 + signal)
                    .ok()
                    .filter(|_| *signal < 128)
                    .unwrap_or(130),
            ),
            _ => None,
        }
    }

    /// True for a bad setup found before anything was sent (exit 2 upstream; everything else is
    /// a failure of the external service, exit 3).
    pub fn is_config(&self) -> bool {
        matches!(self, LlmError::Config(_))
    }
}

impl crate::error::ExitStatus for LlmError {
    /// 2 for a bad setup, 128 + the signal for an interrupted call, else 3: the external
    /// service failed (SPEC §3).
    fn exit_code(&self) -> u8 {
        if self.is_config() {
            2
        } else {
            self.exit_status().unwrap_or(3)
        }
    }
}

impl From<LlmError> for crate::Error {
    fn from(e: LlmError) -> Self {
        crate::Error::with_exit_status(e)
    }
}

/// "SIGINT", "SIGTERM", or "signal N".
fn signal_name(signal: i32) -> String {
    match signal_hook::low_level::signal_name(signal) {
        Some(name) => name.to_string(),
        None => format!("signal {signal}"),
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// " (after N attempts)" when there was more than one, so that a single attempt reads plainly.
fn after(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}

/// "120 s" for whole seconds, "1500 ms" otherwise.
fn show_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// Milliseconds of `d`, saturating (a `u64` of milliseconds outlasts any real call).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_names() {
        for k in AdapterKind::ALL {
            assert_eq!(k.to_string().parse::<AdapterKind>().unwrap(), k);
        }
        let e = "gpt".parse::<AdapterKind>().unwrap_err();
        assert!(e.is_config());
        assert!(e
            .to_string()
            .contains("ollama, openai, cmd, scripted, dummy"));
    }

    #[test]
    fn config_debug_redacts_the_key() {
        let mut cfg = Config::new(AdapterKind::Openai);
        cfg.openai_api_key = Some("sk-secret-123".into());
        let shown = format!("{cfg:?} {cfg:#?}");
        assert!(!shown.contains("sk-secret-123"), "{shown}");
        assert!(shown.contains("***"));
    }

    #[test]
    fn default_models_fill_in_only_when_none_is_configured() {
        let mut cfg = Config::new(AdapterKind::Ollama);
        assert_eq!(cfg.model_name(), "llama3.2");
        cfg.model = Some("qwen3".into());
        assert_eq!(cfg.model_name(), "qwen3");
        assert_eq!(Config::new(AdapterKind::Openai).model_name(), "gpt-4o-mini");
        assert_eq!(Config::new(AdapterKind::Dummy).model_name(), "");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(show_duration(Duration::from_secs(120)), "120 s");
        assert_eq!(show_duration(Duration::from_millis(1500)), "1500 ms");
        assert_eq!(show_duration(Duration::from_millis(20)), "20 ms");
    }

    #[test]
    fn errors_are_one_line_and_say_how_often_they_tried() {
        let e = LlmError::Unreachable {
            provider: "ollama".into(),
            endpoint: "http://127.0.0.1:11434/api/chat".into(),
            detail: "connection refused".into(),
            attempts: 3,
        };
        assert_eq!(
            e.to_string(),
            "ollama at http://127.0.0.1:11434/api/chat: connection refused after 3 attempts"
        );
        assert!(e.is_transient() && !e.is_config());
        let e = LlmError::Status {
            provider: "openai".into(),
            endpoint: "http://x/v1/chat/completions".into(),
            code: 400,
            body_excerpt: "bad model".into(),
            attempts: 1,
        };
        assert_eq!(
            e.to_string(),
            "openai at http://x/v1/chat/completions: HTTP 400: bad model"
        );
        assert!(!e.is_transient());
    }
}
