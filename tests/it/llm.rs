//! The model adapters (`pmm::llm`) against local stub servers and shell scripts: wire format,
//! retries, timeouts, secrets, and the offline adapters.

use crate::harness::Pmm;
use crate::stub::{self, Stub, StubResponse};
use pmm::llm::{adapter, AdapterKind, Config, LlmError, Reply, Request};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const KEY: &str = "sk-test-SECRET-0123456789";

/// Defaults without the environment, with a short timeout and backoff so failures are quick.
fn config(kind: AdapterKind) -> Config {
    let mut cfg = Config::new(kind);
    cfg.timeout = Duration::from_secs(5);
    cfg.backoff = Duration::from_millis(20);
    cfg
}

fn ollama(url: &str) -> Config {
    let mut cfg = config(AdapterKind::Ollama);
    cfg.ollama_host = url.to_string();
    cfg
}

fn openai(url: &str, key: Option<&str>) -> Config {
    let mut cfg = config(AdapterKind::Openai);
    cfg.openai_base_url = format!("{url}/v1/");
    cfg.openai_api_key = key.map(str::to_string);
    cfg
}

fn request(seed: Option<u64>) -> Request {
    Request {
        system: "SYSTEM: you are pmm.\nLedger so far: events 1..3".into(),
        user: "hello, \"model\" é".into(),
        seed,
        ..Request::default()
    }
}

fn generate(cfg: &Config, req: &Request) -> Result<Reply, LlmError> {
    adapter(cfg).expect("valid config").generate(req)
}

fn assert_messages(body: &Value, req: &Request) {
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": req.system},
            {"role": "user", "content": req.user},
        ])
    );
}

#[test]
fn ollama_posts_api_chat_and_reads_the_reply_and_token_counts() {
    let stub = Stub::start(vec![StubResponse::Ollama("Hi.\nCOMMIT: test".into())]);
    let req = request(Some(42));
    let reply = generate(&ollama(&stub.url()), &req).unwrap();
    assert_eq!(reply.text, "Hi.\nCOMMIT: test");
    assert_eq!(reply.model, stub::OLLAMA_MODEL);
    assert_eq!(reply.in_tokens, Some(stub::OLLAMA_TOKENS.0));
    assert_eq!(reply.out_tokens, Some(stub::OLLAMA_TOKENS.1));
    assert_eq!(reply.attempts, 1);

    let [r] = &stub.requests()[..] else {
        panic!("one request expected: {:?}", stub.requests())
    };
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/api/chat"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("authorization"), None);
    assert_eq!(r.body["model"], "llama3.2");
    assert_eq!(r.body["stream"], false);
    assert_messages(&r.body, &req);
    let options = &r.body["options"];
    assert_eq!(options["temperature"].as_f64(), Some(0.0));
    assert_eq!(options["top_p"].as_f64(), Some(1.0));
    assert_eq!(options["seed"].as_u64(), Some(42));
}

#[test]
fn ollama_sends_no_seed_when_none_is_given() {
    let stub = Stub::start(vec![StubResponse::Ollama("ok".into())]);
    generate(&ollama(&stub.url()), &request(None)).unwrap();
    let options = &stub.requests()[0].body["options"];
    assert!(options.get("seed").is_none(), "{options}");
    assert!(options.get("num_predict").is_none(), "{options}");
    assert!(options.get("temperature").is_some());
}

#[test]
fn a_token_limit_goes_to_each_provider_in_its_own_words() {
    let req = Request {
        max_tokens: Some(64),
        ..request(None)
    };
    let stub = Stub::start(vec![StubResponse::Ollama("ok".into())]);
    generate(&ollama(&stub.url()), &req).unwrap();
    let options = &stub.requests()[0].body["options"];
    assert_eq!(options["num_predict"].as_u64(), Some(64), "{options}");

    let stub = Stub::start(vec![StubResponse::OpenAi("ok".into())]);
    generate(&openai(&stub.url(), None), &req).unwrap();
    let body = &stub.requests()[0].body;
    assert_eq!(body["max_tokens"].as_u64(), Some(64), "{body}");

    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.json");
    generate(&cmd_config(&format!("cat > {}; echo ok", q(&input))), &req).unwrap();
    let sent: Value = serde_json::from_str(&std::fs::read_to_string(&input).unwrap()).unwrap();
    assert_eq!(sent["max_tokens"].as_u64(), Some(64), "{sent}");
}

#[test]
fn ollama_host_may_be_a_bare_host_and_port() {
    let stub = Stub::start(vec![StubResponse::Ollama("ok".into())]);
    let mut cfg = ollama(&stub.url());
    cfg.ollama_host = stub.url().trim_start_matches("http://").to_string();
    cfg.model = Some("qwen3:0.6b".into());
    let reply = generate(&cfg, &request(None)).unwrap();
    assert_eq!(reply.text, "ok");
    assert_eq!(stub.requests()[0].body["model"], "qwen3:0.6b");
}

#[test]
fn openai_posts_chat_completions_with_the_bearer_key() {
    let stub = Stub::start(vec![StubResponse::OpenAi("Hello from gpt.".into())]);
    let req = request(Some(7));
    let cfg = openai(&stub.url(), Some(KEY));
    let mut a = adapter(&cfg).unwrap();
    assert_eq!((a.provider(), a.model()), ("openai", "gpt-4o-mini"));
    let reply = a.generate(&req).unwrap();
    assert_eq!(reply.text, "Hello from gpt.");
    assert_eq!(reply.model, stub::OPENAI_MODEL);
    assert_eq!(reply.in_tokens, Some(stub::OPENAI_TOKENS.0));
    assert_eq!(reply.out_tokens, Some(stub::OPENAI_TOKENS.1));

    let r = &stub.requests()[0];
    // The base URL's trailing slash is not doubled.
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(r.header("authorization"), Some(&*format!("Bearer {KEY}")));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.body["model"], "gpt-4o-mini");
    assert_messages(&r.body, &req);
    assert_eq!(r.body["temperature"].as_f64(), Some(0.0));
    assert_eq!(r.body["top_p"].as_f64(), Some(1.0));
    assert_eq!(r.body["seed"].as_u64(), Some(7));
    assert!(r.body.get("stream").is_none());
}

#[test]
fn openai_without_a_key_sends_no_authorization_and_no_seed() {
    let stub = Stub::start(vec![StubResponse::OpenAi("local".into())]);
    let reply = generate(&openai(&stub.url(), None), &request(None)).unwrap();
    assert_eq!(reply.text, "local");
    let r = &stub.requests()[0];
    assert_eq!(r.header("authorization"), None);
    assert!(r.body.get("seed").is_none(), "{}", r.body);
    assert!(r.body.get("max_tokens").is_none(), "{}", r.body);
}

#[test]
fn a_500_is_retried_and_the_retry_succeeds() {
    let stub = Stub::start(vec![
        StubResponse::Status(500, r#"{"error":"loading model"}"#.into()),
        StubResponse::Ollama("second time".into()),
    ]);
    let reply = generate(&ollama(&stub.url()), &request(None)).unwrap();
    assert_eq!(reply.text, "second time");
    assert_eq!(reply.attempts, 2);
    assert_eq!(stub.requests().len(), 2);
}

#[test]
fn a_429_is_retried_and_the_retry_succeeds() {
    let stub = Stub::start(vec![
        StubResponse::Status(429, r#"{"error":{"message":"rate limited"}}"#.into()),
        StubResponse::OpenAi("after the limit".into()),
    ]);
    let reply = generate(&openai(&stub.url(), Some(KEY)), &request(None)).unwrap();
    assert_eq!(reply.text, "after the limit");
    assert_eq!(reply.attempts, 2);
}

#[test]
fn a_persistent_503_fails_after_two_retries_with_the_body_excerpt() {
    let stub = Stub::start(vec![StubResponse::Status(
        503,
        r#"{"error":"server busy"}"#.into(),
    )]);
    let e = generate(&ollama(&stub.url()), &request(None)).unwrap_err();
    assert!(
        matches!(
            e,
            LlmError::Status {
                code: 503,
                attempts: 3,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.is_transient() && !e.is_config());
    let msg = e.to_string();
    assert!(msg.contains("HTTP 503: server busy"), "{msg}");
    assert!(msg.contains("(after 3 attempts)"), "{msg}");
    assert_eq!(stub.requests().len(), 3);
}

#[test]
fn retries_are_configurable() {
    let stub = Stub::start(vec![StubResponse::Status(500, String::new())]);
    let mut cfg = ollama(&stub.url());
    cfg.retries = 0;
    let e = generate(&cfg, &request(None)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("ollama at {}/api/chat: HTTP 500", stub.url())
    );
    assert_eq!(stub.requests().len(), 1);
}

#[test]
fn a_400_is_not_retried_and_names_status_and_body() {
    let stub = Stub::start(vec![
        StubResponse::Status(400, "bad request:\n  unknown field \"x\"".into()),
        StubResponse::OpenAi("never reached".into()),
    ]);
    let e = generate(&openai(&stub.url(), None), &request(None)).unwrap_err();
    assert!(
        matches!(
            e,
            LlmError::Status {
                code: 400,
                attempts: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.is_transient());
    let msg = e.to_string();
    assert_eq!(
        msg,
        format!(
            "openai at {}/v1/chat/completions: HTTP 400: bad request: unknown field \"x\"",
            stub.url()
        )
    );
    assert_eq!(stub.requests().len(), 1);
}

#[test]
fn a_server_that_is_down_is_unreachable_after_three_attempts() {
    let url = Stub::down_url();
    let e = generate(&ollama(&url), &request(None)).unwrap_err();
    assert!(
        matches!(e, LlmError::Unreachable { attempts: 3, .. }),
        "{e:?}"
    );
    assert!(e.is_transient() && !e.is_config());
    assert_eq!(
        e.to_string(),
        format!("ollama at {url}/api/chat: connection refused after 3 attempts")
    );
}

#[test]
fn a_connection_closed_without_an_answer_is_retried() {
    let stub = Stub::start(vec![
        StubResponse::Close,
        StubResponse::OpenAi("second connection".into()),
    ]);
    let reply = generate(&openai(&stub.url(), None), &request(None)).unwrap();
    assert_eq!(reply.text, "second connection");
    assert_eq!(reply.attempts, 2);

    let stub = Stub::start(vec![StubResponse::Close]);
    let e = generate(&ollama(&stub.url()), &request(None)).unwrap_err();
    assert!(
        matches!(e, LlmError::Unreachable { attempts: 3, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("closed without an answer"), "{e}");
}

#[test]
fn a_hanging_server_times_out_once_without_retries() {
    let stub = Stub::start(vec![StubResponse::Hang]);
    let mut cfg = ollama(&stub.url());
    cfg.timeout = Duration::from_secs(1);
    let started = Instant::now();
    let e = generate(&cfg, &request(None)).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, LlmError::Timeout { attempts: 1, .. }), "{e:?}");
    assert!(e.is_transient());
    assert_eq!(
        e.to_string(),
        format!("ollama at {}/api/chat: no answer within 1 s", stub.url())
    );
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert!(
        took < Duration::from_millis(2500),
        "timed out late: {took:?}"
    );
    assert_eq!(stub.requests().len(), 1);
}

#[test]
fn an_answer_that_is_not_the_protocol_is_a_bad_response_not_retried() {
    let stub = Stub::start(vec![StubResponse::Status(200, "<html>proxy</html>".into())]);
    let e = generate(&openai(&stub.url(), None), &request(None)).unwrap_err();
    assert!(matches!(e, LlmError::BadResponse { .. }), "{e:?}");
    assert!(e.to_string().contains("not JSON"), "{e}");
    assert_eq!(stub.requests().len(), 1);

    let stub = Stub::start(vec![StubResponse::Status(200, r#"{"choices":[]}"#.into())]);
    let e = generate(&openai(&stub.url(), None), &request(None)).unwrap_err();
    assert!(
        e.to_string().contains("no choices[0].message.content"),
        "{e}"
    );

    // An ollama body without message.content (the wrong server on that port).
    let stub = Stub::start(vec![StubResponse::OpenAi("wrong api".into())]);
    let e = generate(&ollama(&stub.url()), &request(None)).unwrap_err();
    assert!(e.to_string().contains("no message.content"), "{e}");
}

#[test]
fn a_redirect_is_reported_not_followed() {
    let stub = Stub::start(vec![StubResponse::Redirect(
        "https://u:pw@elsewhere.example/v1/chat/completions".into(),
    )]);
    let e = generate(&openai(&stub.url(), Some(KEY)), &request(None)).unwrap_err();
    assert!(matches!(e, LlmError::BadResponse { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("HTTP 307 redirect to https://elsewhere.example/v1/chat/completions"),
        "{msg}"
    );
    assert!(!msg.contains("pw"), "{msg}");
    assert_eq!(stub.requests().len(), 1);
}

#[test]
fn the_api_key_never_appears_in_errors_or_debug_output() {
    let echoing = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {KEY}. See the docs.","code":"invalid_api_key"}}}}"#
    );
    let raw = format!("denied for Bearer {KEY}\n");
    for body in [echoing, raw] {
        let stub = Stub::start(vec![StubResponse::Status(401, body)]);
        let cfg = openai(&stub.url(), Some(KEY));
        let e = generate(&cfg, &request(None)).unwrap_err();
        assert!(matches!(
            e,
            LlmError::Status {
                code: 401,
                attempts: 1,
                ..
            }
        ));
        for shown in [e.to_string(), format!("{e:?}")] {
            assert!(!shown.contains(KEY), "key leaked: {shown}");
            assert!(!shown.contains("SECRET"), "part of the key leaked: {shown}");
            assert!(shown.contains("***"), "{shown}");
        }
        assert!(e.to_string().contains("HTTP 401"));
        // It was sent, though.
        assert_eq!(
            stub.requests()[0].header("authorization"),
            Some(&*format!("Bearer {KEY}"))
        );
        for shown in [format!("{cfg:?}"), format!("{cfg:#?}")] {
            assert!(!shown.contains(KEY), "key leaked: {shown}");
        }
    }
}

#[test]
fn credentials_in_a_base_url_are_not_shown() {
    let down = Stub::down_url();
    let mut cfg = openai(&down, Some(KEY));
    cfg.openai_base_url = down.replace("http://", "http://user:hunter2@") + "/v1?api-key=abc";
    cfg.retries = 0;
    let e = generate(&cfg, &request(None)).unwrap_err();
    let msg = e.to_string();
    assert!(!msg.contains("hunter2") && !msg.contains("abc"), "{msg}");
    assert!(msg.contains(&down), "{msg}");
}

#[test]
fn bad_urls_and_settings_are_config_errors() {
    let mut cfg = config(AdapterKind::Openai);
    cfg.openai_base_url = "api.openai.com/v1".into();
    assert!(adapter(&cfg).err().unwrap().is_config());
    let mut cfg = config(AdapterKind::Ollama);
    cfg.timeout = Duration::ZERO;
    assert!(adapter(&cfg).err().unwrap().is_config());
}

/// A tempdir and the adapter config running `command` there with `sh -c`.
fn cmd_config(command: &str) -> Config {
    let mut cfg = config(AdapterKind::Cmd);
    cfg.command = Some(command.to_string());
    cfg
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

#[test]
fn cmd_gets_the_request_as_json_on_stdin_and_replies_with_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.json");
    let mut cfg = cmd_config(&format!(
        "cat > {}; printf 'first line\\nsecond line\\n'",
        q(&input)
    ));
    cfg.model = Some("my-model".into());
    let mut a = adapter(&cfg).unwrap();
    assert_eq!((a.provider(), a.model()), ("cmd", "my-model"));
    let req = Request {
        turn: 4,
        ..request(Some(9))
    };
    let reply = a.generate(&req).unwrap();
    // Exactly one trailing newline is dropped.
    assert_eq!(reply.text, "first line\nsecond line");
    assert_eq!(reply.model, "my-model");
    assert_eq!(
        (reply.in_tokens, reply.out_tokens, reply.attempts),
        (None, None, 1)
    );

    let sent = std::fs::read_to_string(&input).unwrap();
    assert_eq!(sent.lines().count(), 1, "one JSON line: {sent:?}");
    let sent: Value = serde_json::from_str(&sent).unwrap();
    assert_eq!(sent["system"], req.system.as_str());
    assert_eq!(sent["user"], req.user.as_str());
    assert_eq!(sent["model"], "my-model");
    assert_eq!(sent["temperature"].as_f64(), Some(0.0));
    assert_eq!(sent["top_p"].as_f64(), Some(1.0));
    assert_eq!(sent["seed"].as_u64(), Some(9));
    assert_eq!(sent["turn"].as_u64(), Some(4));
    assert_messages(&sent, &req);
}

#[test]
fn cmd_keeps_newlines_beyond_the_last_and_sends_a_null_seed() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.json");
    let cfg = cmd_config(&format!("tee {} >/dev/null; printf 'a\\n\\n'", q(&input)));
    let reply = generate(&cfg, &request(None)).unwrap();
    assert_eq!(reply.text, "a\n");
    let sent: Value = serde_json::from_str(&std::fs::read_to_string(&input).unwrap()).unwrap();
    assert_eq!(sent["seed"], Value::Null);
    assert_eq!(sent["max_tokens"], Value::Null);
    assert_eq!(sent["model"], "");
}

#[test]
fn cmd_that_ignores_a_large_prompt_still_works() {
    let cfg = cmd_config("echo ignored");
    let req = Request {
        system: "x".repeat(1 << 20),
        ..request(None)
    };
    assert_eq!(generate(&cfg, &req).unwrap().text, "ignored");
}

#[test]
fn cmd_failure_reports_the_exit_status_and_first_stderr_line() {
    let cfg = cmd_config(
        "cat >/dev/null; echo partial; echo 'model not found: x' >&2; echo more >&2; exit 3",
    );
    let e = generate(&cfg, &request(None)).unwrap_err();
    assert!(matches!(e, LlmError::Command { .. }), "{e:?}");
    assert!(!e.is_transient() && !e.is_config());
    assert_eq!(
        e.to_string(),
        "cmd at cat: exited with status 3: model not found: x"
    );
}

#[test]
fn cmd_timeout_kills_the_program_and_what_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    // The shell forks a background sleep and waits: killing only the shell would leave the
    // sleep holding the pipes for 10 s.
    let mut cfg = cmd_config(&format!("sleep 10 & echo $! > {}; wait", q(&pid_file)));
    cfg.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let e = generate(&cfg, &request(None)).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, LlmError::Timeout { .. }), "{e:?}");
    assert_eq!(e.to_string(), "cmd at sleep: no answer within 500 ms");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Reaped or a zombie of the shell's, but not sleeping on: give the kernel a moment.
    let deadline = Instant::now() + Duration::from_secs(2);
    while unsafe { libc::kill(pid, 0) } == 0 && !is_zombie(pid) {
        assert!(
            Instant::now() < deadline,
            "sleep {pid} survived the timeout"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

#[test]
fn cmd_without_a_command_is_a_config_error() {
    let e = adapter(&config(AdapterKind::Cmd)).err().unwrap();
    assert!(e.is_config(), "{e}");
}

fn script(lines: &str) -> (tempfile::TempDir, Config) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replies.jsonl");
    std::fs::write(&path, lines).unwrap();
    let mut cfg = config(AdapterKind::Scripted);
    cfg.script = Some(path);
    (dir, cfg)
}

#[test]
fn scripted_replies_follow_the_turn_number() {
    let (_dir, cfg) =
        script("\"first\"\n\n{\"reply\": \"second\\nCOMMIT: two lines\"}\n   \n\"third\"\n");
    let mut a = adapter(&cfg).unwrap();
    assert_eq!((a.provider(), a.model()), ("scripted", ""));
    let at = |a: &mut Box<dyn pmm::llm::Adapter>, turn| {
        a.generate(&Request {
            turn,
            ..Request::default()
        })
    };
    assert_eq!(at(&mut a, 3).unwrap().text, "third");
    assert_eq!(at(&mut a, 1).unwrap().text, "first");
    let r = at(&mut a, 2).unwrap();
    assert_eq!(r.text, "second\nCOMMIT: two lines");
    assert_eq!((r.latency_ms, r.in_tokens, r.out_tokens), (0, None, None));

    let e = at(&mut a, 4).unwrap_err();
    assert!(
        matches!(
            e,
            LlmError::ScriptExhausted {
                turn: 4,
                replies: 3,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.is_transient() && !e.is_config());
    assert!(e.to_string().contains("replies.jsonl"), "{e}");
}

#[test]
fn scripted_malformed_line_is_a_config_error_naming_file_and_line() {
    for bad in ["plain text", "42", r#"{"text": "x"}"#, r#"{"reply": 1}"#] {
        let (_dir, cfg) = script(&format!("\"ok\"\n\n{bad}\n\"ok\"\n"));
        let e = adapter(&cfg).err().unwrap();
        assert!(e.is_config(), "{e}");
        assert!(e.to_string().contains("replies.jsonl:3: "), "{bad}: {e}");
    }
}

#[test]
fn scripted_missing_or_empty_script_is_a_config_error() {
    let (dir, mut cfg) = script("\n\n");
    assert!(adapter(&cfg).err().unwrap().is_config());
    cfg.script = Some(dir.path().join("missing.jsonl"));
    let e = adapter(&cfg).err().unwrap();
    assert!(
        e.is_config() && e.to_string().contains("missing.jsonl"),
        "{e}"
    );
    cfg.script = None;
    assert!(adapter(&cfg).err().unwrap().is_config());
}

#[test]
fn dummy_echoes_the_user_and_opens_a_commitment() {
    let mut a = adapter(&config(AdapterKind::Dummy)).unwrap();
    assert_eq!((a.provider(), a.model()), ("dummy", ""));
    let r = a.generate(&request(None)).unwrap();
    assert_eq!(r.text, "Echo: hello, \"model\" é\nCOMMIT: note this item");
    assert_eq!(r.model, "");
    assert_eq!((r.latency_ms, r.attempts, r.in_tokens), (0, 1, None));
}

/// Issue 15 item 9: Ollama is told a context window that holds the whole prompt and the reply
/// (it silently cuts a longer prompt otherwise), history included.
#[test]
fn ollama_gets_a_context_window_for_the_whole_prompt() {
    let stub = Stub::start(vec![
        StubResponse::Ollama("ok".into()),
        StubResponse::Ollama("ok".into()),
    ]);
    generate(&ollama(&stub.url()), &request(None)).unwrap();
    let big = Request {
        system: "word ".repeat(12_000),
        history: vec![("user".into(), "earlier ".repeat(1_000))],
        max_tokens: Some(512),
        ..request(None)
    };
    generate(&ollama(&stub.url()), &big).unwrap();
    let reqs = stub.requests();
    let small_ctx = reqs[0].body["options"]["num_ctx"].as_u64().unwrap();
    let big_ctx = reqs[1].body["options"]["num_ctx"].as_u64().unwrap();
    assert_eq!(small_ctx, 4096);
    // 68,000 characters at 3 a token, plus the reply: more than Ollama's default 2,048/4,096.
    assert!(big_ctx >= 68_000 / 3 + 512, "{big_ctx}");
    assert_eq!(big_ctx % 4096, 0);
    // The history went as chat messages, between the system prompt and the user's message.
    let roles: Vec<&str> = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "user"]);
}

/// `user:PASS` of a base URL goes out as `Authorization: Basic <base64>`; a server that
/// echoes it in an error, or in a reply, gets it nowhere (issue 34 item 7).
#[test]
fn credentials_in_a_base_url_are_scrubbed_from_an_echoing_error_and_reply() {
    const BASIC: &str = "YWRtaW46UEFTUw=="; // base64 of admin:PASS
    let stub = Stub::start(vec![
        StubResponse::EchoAuthStatus(500),
        StubResponse::EchoAuth,
    ]);
    let mut cfg = openai(&stub.url(), None);
    cfg.openai_base_url = stub.url().replace("http://", "http://admin:PASS@") + "/v1";
    cfg.retries = 0;
    let e = generate(&cfg, &request(None)).unwrap_err();
    assert_eq!(
        stub.requests()[0].header("authorization"),
        Some(&*format!("Basic {BASIC}")),
        "the credentials were sent"
    );
    for shown in [e.to_string(), format!("{e:?}")] {
        assert!(!shown.contains(BASIC) && !shown.contains("PASS"), "{shown}");
        assert!(shown.contains("Basic ***"), "{shown}");
    }
    let reply = generate(&cfg, &request(None)).unwrap();
    let all = format!("{reply:?}");
    assert!(!all.contains(BASIC), "{all}");
    assert!(all.contains("Basic ***"), "{all}");
}

/// The cmd adapter's program inherits the environment; what it prints (reply or error) has
/// the key scrubbed, as an HTTP server's answer has (issue 34 item 7).
#[test]
fn a_cmd_program_that_prints_the_key_gets_it_into_no_reply_or_error() {
    let mut cfg = cmd_config(&format!("echo 'your key is {KEY}'"));
    cfg.openai_api_key = Some(KEY.into());
    let reply = generate(&cfg, &request(None)).unwrap();
    assert_eq!(reply.text, "your key is ***");
    let mut cfg = cmd_config(&format!("echo 'bad key {KEY}' >&2; exit 1"));
    cfg.openai_api_key = Some(KEY.into());
    let e = generate(&cfg, &request(None)).unwrap_err();
    assert!(!e.to_string().contains(KEY), "{e}");
    assert!(e.to_string().contains("bad key ***"), "{e}");
}

/// End to end: `pmm-turn --adapter cmd` with a program that echoes `$OPENAI_API_KEY` and
/// another key of the environment writes neither to the ledger nor to the terminal.
#[test]
fn a_cmd_reply_echoing_keys_from_the_environment_reaches_no_ledger() {
    let pmm = Pmm::new();
    let out = pmm
        .cmd("pmm-turn")
        .env("OPENAI_API_KEY", KEY)
        .env("ANTHROPIC_API_KEY", "sk-ant-other-0123456789")
        .args([
            "--adapter",
            "cmd",
            "--command",
            "echo \"keys: $OPENAI_API_KEY $ANTHROPIC_API_KEY\"",
            "hello",
        ])
        .output()
        .expect("run pmm-turn");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let all = pmm.run("pmm-replay", &[], "").stdout;
    for shown in [&*stdout, &*stderr, &*all] {
        assert!(
            !shown.contains(KEY) && !shown.contains("sk-ant-other"),
            "{shown}"
        );
    }
    assert!(all.contains("keys: *** ***"), "{all}");
}

/// End to end: the echoed Basic credentials are in neither the error on stderr nor the
/// generation_failure.
#[test]
fn credentials_echoed_in_a_500_reach_neither_stderr_nor_the_ledger() {
    const BASIC: &str = "YWRtaW46UEFTUw==";
    let pmm = Pmm::new();
    let stub = Stub::start(vec![StubResponse::EchoAuthStatus(500)]);
    let url = stub.url().replace("http://", "http://admin:PASS@") + "/v1";
    let out = pmm
        .cmd("pmm-turn")
        .env("OPENAI_BASE_URL", &url)
        .args(["--adapter", "openai", "--retries", "0", "hello"])
        .output()
        .expect("run pmm-turn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("HTTP 500") && stderr.contains("Basic ***"),
        "{stderr}"
    );
    let all = pmm.run("pmm-replay", &[], "").stdout;
    assert!(all.contains("generation_failure"), "{all}");
    for shown in [&*stderr, &*all, &*String::from_utf8_lossy(&out.stdout)] {
        assert!(!shown.contains(BASIC) && !shown.contains("PASS"), "{shown}");
    }
}
