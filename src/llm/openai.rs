//! OpenAI-compatible Chat Completions: `POST {base_url}/chat/completions`. The same wire format
//! serves OpenAI, llama.cpp's server, vLLM and LM Studio. Streamed, the answer is server-sent
//! events: `data: {chunk}` lines whose `choices[0].delta.content` are the pieces of the reply,
//! a last chunk with `usage` (asked for with `stream_options.include_usage`), then
//! `data: [DONE]`.

use super::http::{base_url, shown_url, Flow, Http, StreamError, StreamEvent, MAX_REPLY};
use super::preflight::{self, Probe};
use super::scrub::{Holdback, Secrets};
use super::{Adapter, Cancel, Config, LlmError, Reply, Request, TextSink};
use serde_json::{json, Value};

/// The openai adapter. Not `Debug`: it holds the key.
pub(crate) struct OpenAi {
    http: Http,
    probe: Probe,
    base: String,
    url: String,
    model: String,
    key: Option<String>,
    /// What the server may echo back: the key and the credentials of the base URL.
    secrets: Secrets,
}

impl OpenAi {
    /// Checks the base URL and builds the adapter. Without a key no `Authorization` header is
    /// sent, which is what local servers expect.
    pub(crate) fn new(cfg: &Config) -> Result<OpenAi, LlmError> {
        let base = base_url("openai", "OPENAI_BASE_URL", &cfg.openai_base_url)?;
        // A base URL given with the endpoint's path is taken as the base, not doubled.
        let base = base
            .strip_suffix("/chat/completions")
            .unwrap_or(&base)
            .trim_end_matches('/')
            .to_string();
        // Trimmed: a key pasted into `.env` often brings a stray space or `\r` along.
        let key = cfg
            .openai_api_key
            .as_deref()
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_string);
        if key
            .as_deref()
            .is_some_and(|k| k.chars().any(char::is_control))
        {
            // ureq would refuse the header later with an error naming neither cause nor fix.
            return Err(LlmError::Config(
                "openai: the API key contains control characters (a line break inside it?)".into(),
            ));
        }
        let secrets = Secrets::of(cfg);
        Ok(OpenAi {
            http: Http::new("openai", cfg, secrets.clone()),
            probe: Probe::new("openai", cfg, key.clone(), secrets.clone()),
            url: format!("{base}/chat/completions"),
            base,
            model: cfg.model_name().to_string(),
            key,
            secrets,
        })
    }
}

impl Adapter for OpenAi {
    fn provider(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn preflight(&mut self) -> Result<(), LlmError> {
        preflight::openai(&self.probe, &self.base, &self.model)
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
        let mut body = json!({
            "model": self.model,
            "messages": req.messages(),
            "temperature": req.temperature,
            "top_p": req.top_p,
        });
        if let Some(seed) = req.seed {
            body["seed"] = seed.into();
        }
        if let Some(n) = req.max_tokens {
            body["max_tokens"] = n.into();
        }
        if let Some(sink) = sink {
            body["stream"] = true.into();
            body["stream_options"] = json!({"include_usage": true});
            return self.stream(&body, sink, cancel);
        }
        let answer =
            self.http
                .post_json_cancellable(&self.url, &body, self.key.as_deref(), cancel)?;
        let json = &answer.json;
        let text = json
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                let refusal = json
                    .pointer("/choices/0/message/refusal")
                    .and_then(Value::as_str);
                let why = match refusal {
                    Some(r) => format!("the model refused: {r}"),
                    None => "no choices[0].message.content".into(),
                };
                self.http.bad_response(&self.url, why)
            })?;
        let usage = |field: &str| {
            json.pointer(&format!("/usage/{field}"))
                .and_then(Value::as_u64)
        };
        Ok(Reply {
            text: text.to_string(),
            model: json
                .get("model")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                .unwrap_or(&self.model)
                .to_string(),
            in_tokens: usage("prompt_tokens"),
            out_tokens: usage("completion_tokens"),
            latency_ms: answer.latency_ms,
            attempts: answer.attempts,
            finish_reason: json
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }
}

impl OpenAi {
    /// Asks for a streamed answer and hands its pieces to `sink`, ending it past
    /// [`MAX_REPLY`] bytes. A server that answers with one plain JSON completion instead is
    /// read as such.
    fn stream(
        &self,
        body: &Value,
        sink: &TextSink,
        cancel: Option<&Cancel>,
    ) -> Result<Reply, LlmError> {
        let mut parse = StreamParse::new(sink, &self.secrets);
        let streamed =
            self.http
                .post_stream(&self.url, body, self.key.as_deref(), cancel, |event| {
                    parse.event(event)
                })?;
        if parse.text.is_empty() && !parse.refusal.is_empty() {
            return Err(self
                .http
                .bad_response(&self.url, format!("the model refused: {}", parse.refusal)));
        }
        sink.send(&parse.shown.finish());
        let text = self.secrets.text(&parse.text);
        let tokens = |field: &str| parse.usage.get(field).and_then(Value::as_u64);
        Ok(Reply {
            text,
            model: parse.model.unwrap_or_else(|| self.model.clone()),
            in_tokens: tokens("prompt_tokens"),
            out_tokens: tokens("completion_tokens"),
            latency_ms: streamed.latency_ms,
            attempts: streamed.attempts,
            finish_reason: parse.finish,
        })
    }
}

/// What a streamed answer has brought so far, read one server-sent event line at a time.
struct StreamParse<'s> {
    /// Where the pieces of the reply go as they come.
    sink: &'s TextSink,
    /// What is shown never holds a secret, even split over pieces.
    shown: Holdback,
    /// The reply so far.
    text: String,
    /// The refusal so far.
    refusal: String,
    /// The model the server names, when it names one.
    model: Option<String>,
    /// The newest `usage` object (`Null` until one comes).
    usage: Value,
    /// The newest finish reason.
    finish: Option<String>,
    /// Lines that are not server-sent events: a server that did not stream.
    plain: String,
}

impl<'s> StreamParse<'s> {
    /// Nothing read yet; what is shown on `sink` is held back around `secrets`.
    fn new(sink: &'s TextSink, secrets: &Secrets) -> Self {
        StreamParse {
            sink,
            shown: Holdback::new(secrets),
            text: String::new(),
            refusal: String::new(),
            model: None,
            usage: Value::Null,
            finish: None,
            plain: String::new(),
        }
    }

    /// Reads one event of the body: a line, or its end.
    fn event(&mut self, event: StreamEvent<'_>) -> Result<Flow, StreamError> {
        match event {
            StreamEvent::Line(line) => self.line(line),
            StreamEvent::End => self.end(),
        }
    }

    /// Appends a piece of the reply and shows what of it may be shown.
    fn piece(&mut self, piece: &str) -> Result<(), StreamError> {
        self.room(piece)?;
        self.text.push_str(piece);
        self.sink.send(&self.shown.push(piece));
        Ok(())
    }

    /// Whether `more` fits in what a reply may be: the reply, the refusal and what is not
    /// server-sent events add up to at most [`MAX_REPLY`] bytes.
    fn room(&self, more: &str) -> Result<(), StreamError> {
        let kept = self.text.len() + self.refusal.len() + self.plain.len();
        if kept + more.len() > MAX_REPLY {
            return Err(StreamError::TooBig);
        }
        Ok(())
    }

    /// The body ended: what was not server-sent events is read as one plain JSON completion,
    /// when it is one with `choices[0].message.content`.
    fn end(&mut self) -> Result<Flow, StreamError> {
        let Ok(whole) = serde_json::from_str::<Value>(&std::mem::take(&mut self.plain)) else {
            return Ok(Flow::More);
        };
        let Some(content) = whole
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
        else {
            return Ok(Flow::More);
        };
        self.piece(content)?;
        self.model = whole
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string);
        self.usage = whole.get("usage").cloned().unwrap_or(Value::Null);
        self.finish = whole
            .pointer("/choices/0/finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(Flow::Done)
    }

    /// One line: a `data:` line is an event's data; `event:`, `id:`, `retry:`,
    /// `: comments` and blank lines between events are skipped; anything else is kept as
    /// the body of a server that did not stream.
    fn line(&mut self, line: &str) -> Result<Flow, StreamError> {
        let Some(data) = line.strip_prefix("data:") else {
            if !line.starts_with([':', '\r', '\n'])
                && !["event:", "id:", "retry:"]
                    .iter()
                    .any(|f| line.starts_with(f))
            {
                self.room(line)?;
                self.plain.push_str(line);
            }
            return Ok(Flow::More);
        };
        self.data(data.trim())
    }

    /// An event's data: `[DONE]` ends the stream, empty data is skipped, anything else must
    /// be a JSON chunk.
    fn data(&mut self, data: &str) -> Result<Flow, StreamError> {
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|source| StreamError::NotJson {
            what: "an event",
            source,
        })?;
        self.chunk(&chunk)?;
        Ok(Flow::More)
    }

    /// A JSON chunk: an `error` fails the stream; otherwise its content delta, refusal
    /// delta, non-empty model, `usage` object and finish reason are taken in.
    fn chunk(&mut self, chunk: &Value) -> Result<(), StreamError> {
        if let Some(e) = chunk.get("error") {
            let e = e
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| e.to_string(), str::to_string);
            return Err(StreamError::Server(e));
        }
        let delta = chunk.pointer("/choices/0/delta");
        if let Some(piece) = delta.and_then(|d| d.get("content")).and_then(Value::as_str) {
            self.piece(piece)?;
        }
        if let Some(r) = delta.and_then(|d| d.get("refusal")).and_then(Value::as_str) {
            self.room(r)?;
            self.refusal.push_str(r);
        }
        if let Some(m) = chunk.get("model").and_then(Value::as_str) {
            if !m.is_empty() {
                self.model = Some(m.to_string());
            }
        }
        if chunk.get("usage").is_some_and(Value::is_object) {
            self.usage = chunk["usage"].clone();
        }
        if let Some(f) = chunk
            .pointer("/choices/0/finish_reason")
            .and_then(Value::as_str)
        {
            self.finish = Some(f.to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_completions_url_is_built_from_the_base() {
        let mut cfg = Config::new(crate::llm::AdapterKind::Openai);
        cfg.openai_base_url = "http://127.0.0.1:8080/v1/".into();
        let a = OpenAi::new(&cfg).unwrap();
        assert_eq!(a.url, "http://127.0.0.1:8080/v1/chat/completions");
        assert_eq!(a.model(), "gpt-4o-mini");
        // A base URL that already names the endpoint is not doubled.
        cfg.openai_base_url = "http://127.0.0.1:8080/v1/chat/completions/".into();
        let a = OpenAi::new(&cfg).unwrap();
        assert_eq!(a.url, "http://127.0.0.1:8080/v1/chat/completions");
        assert_eq!(a.base, "http://127.0.0.1:8080/v1");
    }

    #[test]
    fn a_key_with_a_newline_is_a_config_error_that_does_not_show_it() {
        let mut cfg = Config::new(crate::llm::AdapterKind::Openai);
        cfg.openai_api_key = Some("sk-ab\ncd".into());
        let e = OpenAi::new(&cfg).err().unwrap();
        assert!(e.is_config());
        assert!(!e.to_string().contains("sk-ab"));
    }

    #[test]
    fn an_unusable_stream_says_why_in_a_typed_error() {
        let sink = TextSink::new(|_| ());
        let mut parse = StreamParse::new(&sink, &Secrets::none());
        let Err(e) = parse.event(StreamEvent::Line("data: nope\n")) else {
            panic!("not JSON, yet read")
        };
        assert!(matches!(
            e,
            StreamError::NotJson {
                what: "an event",
                ..
            }
        ));
        assert!(e
            .to_string()
            .starts_with("an event of the stream is not JSON ("));
        let Err(e) = parse.event(StreamEvent::Line(r#"data: {"error":{"message":"boom"}}"#)) else {
            panic!("an error chunk, yet read")
        };
        assert!(matches!(&e, StreamError::Server(m) if m == "boom"));
        assert_eq!(e.to_string(), "error: boom");
        assert!(matches!(
            parse.event(StreamEvent::Line("data: [DONE]\n")),
            Ok(Flow::Done)
        ));
    }
}
