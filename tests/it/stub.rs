//! Stub model servers for the adapter tests: a tiny HTTP/1.1 server on 127.0.0.1 (one thread,
//! `std::net` only) that answers from a list and records what it was asked. Nothing leaves the
//! machine.

#![allow(dead_code)]

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The model name the stub reports in Ollama answers.
pub const OLLAMA_MODEL: &str = "stub-llama:latest";
/// The weights digest in the modelfile of Ollama's `/api/show` answers.
pub const OLLAMA_DIGEST: &str = "5a17e0c1d2b3a4f5e6d7c8b9a0f1e2d3c4b5a6978877665544332211000fedcb";
/// Prompt and completion token counts in Ollama answers.
pub const OLLAMA_TOKENS: (u64, u64) = (11, 7);
/// The model name the stub reports in OpenAI answers.
pub const OPENAI_MODEL: &str = "stub-gpt";
/// Prompt and completion token counts in OpenAI answers.
pub const OPENAI_TOKENS: (u64, u64) = (13, 5);

/// One canned answer.
#[derive(Debug, Clone)]
pub enum StubResponse {
    /// A successful `/api/chat` answer with this reply.
    Ollama(String),
    /// A successful `/api/chat` answer with this reply, after this many milliseconds (answered
    /// from a thread of its own, so the stub goes on answering others meanwhile).
    SlowOllama(u64, String),
    /// A successful `chat.completion` with this reply.
    OpenAi(String),
    /// A successful `/api/chat` answer with this reply and this `done_reason` ("length":
    /// cut by the token limit).
    OllamaReason(String, String),
    /// A successful `chat.completion` with this reply and this `finish_reason`.
    OpenAiReason(String, String),
    /// A successful `chat.completion` whose reply, model name and `finish_reason` repeat the
    /// request's `Authorization` header (a server that echoes what it was sent).
    EchoAuth,
    /// This status with this body (as `application/json`, whatever it holds).
    Status(u16, String),
    /// A 307 redirect to this URL.
    Redirect(String),
    /// Read the request, then never answer (the connection is held until the stub is dropped).
    Hang,
    /// Read the request, then close the connection without a word.
    Close,
    /// A streamed `/api/chat` answer: newline-delimited JSON in chunked transfer encoding,
    /// one line per piece, then a `"done": true` line with the token counts.
    OllamaStream(Streamed),
    /// A streamed `chat.completion.chunk` answer: server-sent events `data: {…}`, a last chunk
    /// with `usage`, then `data: [DONE]`; the body ends when the connection closes.
    OpenAiStream(Streamed),
    /// A `text/event-stream` answer that never ends: `data: {…}` chunks whose content delta is
    /// this piece, as fast as the client takes them, until it goes away or the stub stops
    /// (served from a thread of its own, so the stub goes on answering).
    EndlessStream(String),
    /// An `application/x-ndjson` `/api/chat` answer that never ends, one line per piece (as
    /// [`StubResponse::EndlessStream`]).
    EndlessNdjson(String),
    /// This status, its body a JSON error whose message repeats the request's `Authorization`
    /// header (a server or proxy that echoes what it was sent).
    EchoAuthStatus(u16),
}

/// The pieces of a streamed answer and how they are sent.
#[derive(Debug, Clone)]
pub struct Streamed {
    /// The reply, in the pieces it is sent in.
    pub pieces: Vec<String>,
    /// False: the connection is closed after the pieces, without the end of the stream.
    pub complete: bool,
    /// When each piece goes.
    pub pace: Pace,
}

impl Streamed {
    /// `pieces`, sent at once, complete.
    pub fn new(pieces: &[&str]) -> Streamed {
        Streamed {
            pieces: pieces.iter().map(|p| p.to_string()).collect(),
            complete: true,
            pace: Pace::Now,
        }
    }

    /// The same, cut after the pieces.
    pub fn cut(mut self) -> Streamed {
        self.complete = false;
        self
    }

    /// The same, paced.
    pub fn pace(mut self, pace: Pace) -> Streamed {
        self.pace = pace;
        self
    }

    /// The whole reply.
    pub fn text(&self) -> String {
        self.pieces.concat()
    }
}

/// When the pieces of a streamed answer are sent.
#[derive(Debug, Clone)]
pub enum Pace {
    /// All at once.
    Now,
    /// One every so often.
    Every(Duration),
    /// Piece N (from 0) once the gate has been opened N times: the test opens it when it has
    /// seen the piece before.
    Gate(Gate),
}

/// A gate a test opens once per piece it has seen (see [`Pace::Gate`]).
#[derive(Debug, Clone, Default)]
pub struct Gate(Arc<(Mutex<(usize, bool)>, Condvar)>);

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Lets one more piece go.
    pub fn open(&self) {
        let (lock, cv) = &*self.0;
        lock.lock().expect("gate lock").0 += 1;
        cv.notify_all();
    }

    /// True when the stub had to send a piece without waiting for the gate (it waits 10 s at
    /// most): the client did not show the piece before while it was being held back.
    pub fn timed_out(&self) -> bool {
        self.0 .0.lock().expect("gate lock").1
    }

    /// Waits until the gate has been opened `n` times (at most 10 s).
    fn wait(&self, n: usize) {
        let (lock, cv) = &*self.0;
        let guard = lock.lock().expect("gate lock");
        let (mut guard, timeout) = cv
            .wait_timeout_while(guard, Duration::from_secs(10), |(opened, _)| *opened < n)
            .expect("gate lock");
        if timeout.timed_out() {
            guard.1 = true;
        }
    }
}

/// How the stub answers the cheap requests `pmm-turn` makes before a turn (Ollama's
/// `POST /api/show` and `GET /api/tags`, OpenAI's `GET …/models` and `GET …/models/NAME`,
/// and `GET /v1/models` asked of an Ollama address). They are answered apart from the list
/// of [`StubResponse`]s (which serve the chat requests, in order) and recorded apart, in
/// [`Stub::preflights`].
#[derive(Debug, Clone)]
pub enum Preflight {
    /// Every model exists (the default).
    Ok,
    /// Only these models exist: Ollama's `/api/show` of another is its 404 "model not found",
    /// OpenAI's list holds these, and `/models/OTHER` is OpenAI's 404 `model_not_found`.
    Models(Vec<String>),
    /// Every preflight request gets this status and body.
    Status(u16, String),
    /// The server speaks only the OpenAI API: `/api/...` is a 404 that is not Ollama's, and
    /// `GET /v1/models` lists one model.
    OpenAiOnly,
    /// The server speaks only Ollama's API: `…/models` is a 404.
    OllamaOnly,
}

/// A request the stub received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names lowercased.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON, or as a JSON string when it is not JSON.
    pub body: Value,
}

impl Recorded {
    /// A header by its (any case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// A running stub; stops when dropped.
pub struct Stub {
    addr: SocketAddr,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    preflights: Arc<Mutex<Vec<Recorded>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Stub {
    /// Serves `responses` in order, one per connection, repeating the last one when they run
    /// out.
    pub fn start(responses: Vec<StubResponse>) -> Stub {
        Stub::start_with(responses, Preflight::Ok)
    }

    /// [`Stub::start`], answering the preflight requests as `preflight` says.
    pub fn start_with(responses: Vec<StubResponse>, preflight: Preflight) -> Stub {
        assert!(!responses.is_empty(), "a stub needs at least one response");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let preflights = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (recorded, preflights, stop) = (recorded.clone(), preflights.clone(), stop.clone());
            std::thread::spawn(move || {
                serve(listener, responses, preflight, recorded, preflights, stop)
            })
        };
        Stub {
            addr,
            recorded,
            preflights,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every chat request received so far, in order (preflight requests are not among them).
    pub fn requests(&self) -> Vec<Recorded> {
        self.recorded.lock().expect("stub lock").clone()
    }

    /// Every preflight request received so far, in order.
    pub fn preflights(&self) -> Vec<Recorded> {
        self.preflights.lock().expect("stub lock").clone()
    }

    /// A URL on 127.0.0.1 where nothing listens: a port that was just bound and released.
    pub fn down_url() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        drop(listener);
        format!("http://{addr}")
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so that the thread sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    listener: TcpListener,
    responses: Vec<StubResponse>,
    preflight: Preflight,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    preflights: Arc<Mutex<Vec<Recorded>>>,
    stop: Arc<AtomicBool>,
) {
    let mut held = Vec::new(); // hung connections, closed when the stub stops
    let mut next = 0;
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(mut conn) = conn else { continue };
        // A client that stalls must not stall the stub.
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let Some(request) = read_request(&mut conn) else {
            continue;
        };
        if is_preflight(&request) {
            let (code, body) = answer_preflight(&preflight, &request);
            preflights.lock().expect("stub lock").push(request);
            reply(&mut conn, code, &body);
            continue;
        }
        let auth = request
            .header("authorization")
            .unwrap_or_default()
            .to_string();
        recorded.lock().expect("stub lock").push(request);
        let response = &responses[next.min(responses.len() - 1)];
        next += 1;
        match response {
            StubResponse::Hang => held.push(conn),
            StubResponse::Close => {
                let _ = conn.shutdown(Shutdown::Both);
            }
            StubResponse::Redirect(to) => {
                let head = format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = conn.write_all(head.as_bytes());
                let _ = conn.shutdown(Shutdown::Write);
            }
            StubResponse::Ollama(text) => reply(&mut conn, 200, &ollama_body(text)),
            StubResponse::SlowOllama(ms, text) => {
                let (ms, body) = (*ms, ollama_body(text));
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    reply(&mut conn, 200, &body);
                });
            }
            StubResponse::OpenAi(text) => reply(&mut conn, 200, &openai_body(text)),
            StubResponse::OllamaReason(text, why) => {
                let mut body: Value = serde_json::from_str(&ollama_body(text)).unwrap();
                body["done_reason"] = why.as_str().into();
                reply(&mut conn, 200, &body.to_string())
            }
            StubResponse::OpenAiReason(text, why) => {
                let mut body: Value = serde_json::from_str(&openai_body(text)).unwrap();
                body["choices"][0]["finish_reason"] = why.as_str().into();
                reply(&mut conn, 200, &body.to_string())
            }
            StubResponse::EchoAuth => {
                let key = auth.strip_prefix("Bearer ").unwrap_or(&auth);
                let text = format!(
                    "Your request said Authorization: {auth}\nso your key is {key}.\nCOMMIT: keep {key} safe"
                );
                let mut body: Value = serde_json::from_str(&openai_body(&text)).unwrap();
                body["model"] = format!("{OPENAI_MODEL}-{key}").into();
                body["choices"][0]["finish_reason"] = format!("stop {key}").into();
                reply(&mut conn, 200, &body.to_string())
            }
            StubResponse::Status(code, body) => reply(&mut conn, *code, body),
            StubResponse::OllamaStream(st) => ollama_stream(&mut conn, st),
            StubResponse::OpenAiStream(st) => openai_stream(&mut conn, st),
            StubResponse::EchoAuthStatus(code) => {
                let body = json!({"error": {"message": format!("rejected Authorization: {auth}"), "type": "server_error"}});
                reply(&mut conn, *code, &body.to_string())
            }
            StubResponse::EndlessStream(piece) => {
                let (piece, stop) = (piece.clone(), stop.clone());
                std::thread::spawn(move || endless(conn, &piece, true, &stop));
            }
            StubResponse::EndlessNdjson(piece) => {
                let (piece, stop) = (piece.clone(), stop.clone());
                std::thread::spawn(move || endless(conn, &piece, false, &stop));
            }
        }
    }
}

/// The requests `pmm-turn` makes before a turn: every GET, and Ollama's `POST /api/show`.
fn is_preflight(r: &Recorded) -> bool {
    r.method == "GET" || r.path.ends_with("/api/show")
}

fn answer_preflight(p: &Preflight, r: &Recorded) -> (u16, String) {
    let ollama_api = r.path.starts_with("/api/");
    let asked = r.body["model"]
        .as_str()
        .or_else(|| r.body["name"].as_str())
        .unwrap_or_default()
        .to_string();
    let known = |m: &str| match p {
        Preflight::Models(ms) => ms.iter().any(|k| k == m),
        _ => true,
    };
    let not_found = r#"{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}"#;
    match p {
        Preflight::Status(code, body) => (*code, body.clone()),
        Preflight::OpenAiOnly if ollama_api || !r.path.starts_with("/v1/") => {
            (404, not_found.into())
        }
        Preflight::OllamaOnly if !ollama_api => (404, "404 page not found".into()),
        _ if r.path.ends_with("/api/show") => {
            if known(&asked) {
                // The modelfile names the weights' blob: its digest identifies an embedding
                // model (llm/embed/server.rs).
                let modelfile = format!("FROM /stub/blobs/sha256-{OLLAMA_DIGEST}\n");
                (
                    200,
                    json!({"details": {"family": "stub"}, "modelfile": modelfile}).to_string(),
                )
            } else {
                (
                    404,
                    json!({"error": format!("model '{asked}' not found")}).to_string(),
                )
            }
        }
        _ if r.path.ends_with("/api/tags") => {
            let names = match p {
                Preflight::Models(ms) => ms.clone(),
                _ => vec![OLLAMA_MODEL.to_string()],
            };
            let models: Vec<Value> = names
                .iter()
                .map(|n| json!({"name": n, "model": n}))
                .collect();
            (200, json!({ "models": models }).to_string())
        }
        _ if r.path.ends_with("/models") => {
            let names = match p {
                Preflight::Models(ms) => ms.clone(),
                _ => vec![OPENAI_MODEL.to_string()],
            };
            let data: Vec<Value> = names
                .iter()
                .map(|n| json!({"id": n, "object": "model", "owned_by": "stub"}))
                .collect();
            (200, json!({"object": "list", "data": data}).to_string())
        }
        _ => {
            let name = r.path.rsplit('/').next().unwrap_or_default();
            if r.path.contains("/models/") && known(name) {
                (200, json!({"id": name, "object": "model"}).to_string())
            } else if r.path.contains("/models/") {
                let msg =
                    format!("The model `{name}` does not exist or you do not have access to it.");
                (404, json!({"error": {"message": msg, "type": "invalid_request_error", "code": "model_not_found"}}).to_string())
            } else {
                (404, not_found.into())
            }
        }
    }
}

/// Reads the request line and headers, then exactly `Content-Length` bytes of body.
fn read_request(conn: &mut TcpStream) -> Option<Recorded> {
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = BTreeMap::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let header = line.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let body = String::from_utf8_lossy(&body).into_owned();
    let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn reply(conn: &mut TcpStream, code: u16, body: &str) {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(body.as_bytes());
    let _ = conn.flush();
    let _ = conn.shutdown(Shutdown::Write);
}

fn ollama_body(text: &str) -> String {
    json!({
        "model": OLLAMA_MODEL,
        "created_at": "2025-11-24T05:55:41.194157Z",
        "message": {"role": "assistant", "content": text},
        "done_reason": "stop",
        "done": true,
        "total_duration": 1_000_000,
        "prompt_eval_count": OLLAMA_TOKENS.0,
        "eval_count": OLLAMA_TOKENS.1,
    })
    .to_string()
}

fn openai_body(text: &str) -> String {
    json!({
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 1_763_963_741,
        "model": OPENAI_MODEL,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
        }],
        "usage": {
            "prompt_tokens": OPENAI_TOKENS.0,
            "completion_tokens": OPENAI_TOKENS.1,
            "total_tokens": OPENAI_TOKENS.0 + OPENAI_TOKENS.1,
        },
    })
    .to_string()
}

/// Sends the pieces of `st` at its pace, each through `send`; false when the client is gone.
fn paced(st: &Streamed, mut send: impl FnMut(&str) -> std::io::Result<()>) -> bool {
    for (i, piece) in st.pieces.iter().enumerate() {
        match &st.pace {
            Pace::Now => {}
            Pace::Every(d) => std::thread::sleep(*d),
            Pace::Gate(g) => g.wait(i),
        }
        if send(piece).is_err() {
            return false;
        }
    }
    true
}

fn ollama_stream(conn: &mut TcpStream, st: &Streamed) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    if conn.write_all(head.as_bytes()).is_err() {
        return;
    }
    let chunk = |conn: &mut TcpStream, line: &str| -> std::io::Result<()> {
        let data = format!("{line}\n");
        conn.write_all(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes())?;
        conn.flush()
    };
    let sent = paced(st, |piece| {
        let line = json!({
            "model": OLLAMA_MODEL,
            "created_at": "2025-11-24T05:55:41.194157Z",
            "message": {"role": "assistant", "content": piece},
            "done": false,
        });
        chunk(conn, &line.to_string())
    });
    if sent && st.complete {
        let last = json!({
            "model": OLLAMA_MODEL,
            "created_at": "2025-11-24T05:55:42.194157Z",
            "message": {"role": "assistant", "content": ""},
            "done_reason": "stop",
            "done": true,
            "total_duration": 1_000_000,
            "prompt_eval_count": OLLAMA_TOKENS.0,
            "eval_count": OLLAMA_TOKENS.1,
        });
        let _ = chunk(conn, &last.to_string());
        let _ = conn.write_all(b"0\r\n\r\n");
    }
    let _ = conn.flush();
    let _ = conn.shutdown(Shutdown::Both);
}

fn openai_stream(conn: &mut TcpStream, st: &Streamed) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
    if conn.write_all(head.as_bytes()).is_err() {
        return;
    }
    let event = |conn: &mut TcpStream, data: &str| -> std::io::Result<()> {
        conn.write_all(format!("data: {data}\n\n").as_bytes())?;
        conn.flush()
    };
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-stub",
            "object": "chat.completion.chunk",
            "created": 1_763_963_741,
            "model": OPENAI_MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
        .to_string()
    };
    if event(
        conn,
        &chunk(json!({"role": "assistant", "content": ""}), Value::Null),
    )
    .is_err()
    {
        return;
    }
    let sent = paced(st, |piece| {
        event(conn, &chunk(json!({"content": piece}), Value::Null))
    });
    if sent && st.complete {
        let _ = event(conn, &chunk(json!({}), json!("stop")));
        let usage = json!({
            "id": "chatcmpl-stub",
            "object": "chat.completion.chunk",
            "created": 1_763_963_741,
            "model": OPENAI_MODEL,
            "choices": [],
            "usage": {
                "prompt_tokens": OPENAI_TOKENS.0,
                "completion_tokens": OPENAI_TOKENS.1,
                "total_tokens": OPENAI_TOKENS.0 + OPENAI_TOKENS.1,
            },
        });
        let _ = event(conn, &usage.to_string());
        let _ = event(conn, "[DONE]");
    }
    let _ = conn.flush();
    let _ = conn.shutdown(Shutdown::Both);
}

/// Sends `piece` as the content of one event (`sse`) or JSON line after another, without end,
/// until the client goes away or `stop` is raised.
fn endless(mut conn: TcpStream, piece: &str, sse: bool, stop: &AtomicBool) {
    let (kind, line) = if sse {
        let chunk = json!({"object": "chat.completion.chunk", "model": OPENAI_MODEL, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
        ("text/event-stream", format!("data: {chunk}\n\n"))
    } else {
        let chunk = json!({"model": OLLAMA_MODEL, "message": {"role": "assistant", "content": piece}, "done": false});
        ("application/x-ndjson", format!("{chunk}\n"))
    };
    let head = format!("HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nConnection: close\r\n\r\n");
    if conn.write_all(head.as_bytes()).is_err() {
        return;
    }
    // Events in batches of about 64 KB: as fast as a local client can take them.
    let batch = line.repeat((65_536 / line.len()).max(1));
    // A write blocks while the client does not read; it fails once the client is gone.
    while !stop.load(Ordering::SeqCst) && conn.write_all(batch.as_bytes()).is_ok() {}
    let _ = conn.shutdown(Shutdown::Both);
}
