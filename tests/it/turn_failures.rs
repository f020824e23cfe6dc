//! A turn's failures and mistakes: those that need not be permanent (preflight, no adapter,
//! empty messages, refused connections, unknown models, rejected keys), honest replies
//! (truncation, Markdown), echoed instructions, the key never stored, and hints in errors. Every server is a stub on 127.0.0.1.

use crate::harness::Pmm;
use crate::stub::{Preflight, Stub, StubResponse};
use serde_json::{json, Value};

fn kinds(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_string))
        .collect()
}

fn turn_record(records: &[Value]) -> Value {
    records
        .iter()
        .find(|r| r["type"] == "turn")
        .cloned()
        .expect("turn record")
}

#[test]
fn no_adapter_is_exit_2_with_how_to_pick_one_and_writes_nothing() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm-turn", &["hello"], "");
    r.assert_error("pmm-turn", &["--adapter", "PMM_ADAPTER", "dummy", "ollama"]);
    assert!(!pmm.db.exists(), "nothing may be created");
    // Stdin and chat are refused the same way.
    let r = pmm.run("pmm-turn", &["--plain"], "hello\n");
    r.assert_error("pmm-turn", &["--adapter"]);
    assert!(!pmm.db.exists());
    // dummy stays available by name, from the flag, the environment or .env.
    let r = pmm.run("pmm-turn", &["--adapter", "dummy", "hello"], "");
    assert_eq!(r.code, 0, "{r:?}");
    std::fs::write(pmm.path(".env"), "PMM_ADAPTER=dummy\n").unwrap();
    let r = pmm.run("pmm-turn", &["--text", "again"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("Echo: again"), "{r:?}");
}

#[test]
fn an_empty_message_is_exit_2() {
    let pmm = Pmm::new();
    for text in ["", "   ", " \t\n "] {
        let r = pmm.run("pmm-turn", &["--adapter", "dummy", text], "");
        r.assert_error("pmm-turn", &["empty"]);
        assert!(!pmm.db.exists(), "{text:?} created the ledger");
    }
    let r = pmm.run(
        "pmm-turn",
        &["--adapter", "dummy"],
        "{\"content\":\"  \"}\n",
    );
    r.assert_error("pmm-turn", &["<stdin>:1", "empty"]);
    let r = pmm.run(
        "pmm-turn",
        &["--adapter", "dummy", "--plain", "--text"],
        "one\n\t \n",
    );
    // A whitespace-only plain line is a blank line: skipped, as before.
    assert_eq!(r.code, 0, "{r:?}");
}

/// Runs `pmm-turn` with `env` and `args`; (exit code, stdout, stderr).
fn turn(pmm: &Pmm, env: &[(&str, String)], args: &[&str]) -> (i32, String, String) {
    let mut c = pmm.cmd("pmm-turn");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.args(args).output().expect("run pmm-turn");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts a preflight failure: exit 3, one error line holding `needles`, nothing on stdout,
/// and the ledger as it was (`before` events; 0: not even created).
fn assert_preflight_failure(pmm: &Pmm, got: (i32, String, String), needles: &[&str], before: u64) {
    let (code, stdout, stderr) = got;
    assert_eq!(code, 3, "exit 3 expected: {stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let line = stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.starts_with("pmm-turn: error: "), "{line}");
    assert!(line.contains("nothing was written"), "{line}");
    for n in needles {
        assert!(line.contains(n), "{line:?} does not mention {n:?}");
    }
    if before == 0 {
        assert!(!pmm.db.exists(), "the ledger must not be created");
    } else {
        assert_eq!(pmm.count(), before, "the ledger must be unchanged");
    }
}

#[test]
fn a_refused_connection_writes_nothing_and_says_what_to_check() {
    let pmm = Pmm::new();
    let got = turn(
        &pmm,
        &[("OLLAMA_HOST", Stub::down_url())],
        &["--adapter", "ollama", "--retries", "0", "are you there?"],
    );
    assert_preflight_failure(
        &pmm,
        got,
        &["connection refused", "ollama serve", "OLLAMA_HOST"],
        0,
    );

    // On an existing ledger: unchanged.
    pmm.seed(3);
    let got = turn(
        &pmm,
        &[("OPENAI_BASE_URL", format!("{}/v1", Stub::down_url()))],
        &["--adapter", "openai", "--retries", "0", "are you there?"],
    );
    assert_preflight_failure(&pmm, got, &["connection refused", "OPENAI_BASE_URL"], 3);
}

#[test]
fn an_unknown_ollama_model_suggests_ollama_pull() {
    let pmm = Pmm::new();
    let stub = Stub::start_with(
        vec![StubResponse::Ollama("never asked".into())],
        Preflight::Models(vec!["llama3.2:latest".into()]),
    );
    let got = turn(
        &pmm,
        &[("OLLAMA_HOST", stub.url())],
        &["--adapter", "ollama", "--model", "llama9", "hello"],
    );
    assert_preflight_failure(
        &pmm,
        got,
        &[
            "model 'llama9' not found",
            "ollama pull llama9",
            "/api/show",
        ],
        0,
    );
    assert!(stub.requests().is_empty(), "the chat was not asked");
    assert_eq!(stub.preflights()[0].body["model"], "llama9");
    // A model it has passes, and the turn goes on.
    let got = turn(
        &pmm,
        &[("OLLAMA_HOST", stub.url())],
        &["--adapter", "ollama", "--model", "llama3.2:latest", "hello"],
    );
    assert_eq!(got.0, 0, "{got:?}");
    assert_eq!(stub.requests().len(), 1);
}

#[test]
fn an_unknown_openai_model_and_a_rejected_key_write_nothing() {
    let pmm = Pmm::new();
    let stub = Stub::start_with(
        vec![StubResponse::OpenAi("never asked".into())],
        Preflight::Models(vec!["gpt-4o-mini".into(), "gpt-4o".into()]),
    );
    let env = [("OPENAI_BASE_URL", format!("{}/v1", stub.url()))];
    let got = turn(
        &pmm,
        &env,
        &["--adapter", "openai", "--model", "gpt-9", "hi"],
    );
    assert_preflight_failure(
        &pmm,
        got,
        &["model 'gpt-9' not found", "--model", "gpt-4o-mini, gpt-4o"],
        0,
    );
    assert!(stub.requests().is_empty());

    const KEY: &str = "sk-test-rejected-0123456789";
    let body = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {KEY}","code":"invalid_api_key"}}}}"#
    );
    for code in [401u16, 403] {
        let stub = Stub::start_with(
            vec![StubResponse::OpenAi("never asked".into())],
            Preflight::Status(code, body.clone()),
        );
        let env = [
            ("OPENAI_BASE_URL", format!("{}/v1", stub.url())),
            ("OPENAI_API_KEY", KEY.to_string()),
        ];
        let got = turn(&pmm, &env, &["--adapter", "openai", "hi"]);
        assert!(!got.2.contains(KEY), "the key leaked: {}", got.2);
        assert_preflight_failure(
            &pmm,
            got,
            &[&format!("HTTP {code}"), "OPENAI_API_KEY", "***"],
            0,
        );
        assert_eq!(
            stub.preflights()[0].header("authorization"),
            Some(&*format!("Bearer {KEY}"))
        );
        assert!(stub.requests().is_empty());
    }
    // Without a key: say that one is wanted.
    let stub = Stub::start_with(
        vec![StubResponse::OpenAi("never asked".into())],
        Preflight::Status(401, r#"{"error":{"message":"no key"}}"#.into()),
    );
    let env = [("OPENAI_BASE_URL", format!("{}/v1", stub.url()))];
    let got = turn(&pmm, &env, &["--adapter", "openai", "hi"]);
    assert_preflight_failure(&pmm, got, &["set OPENAI_API_KEY"], 0);
}

#[test]
fn failures_after_the_request_was_accepted_are_still_recorded() {
    let pmm = Pmm::new();
    let stub = Stub::start(vec![StubResponse::Status(
        503,
        "{\"error\":\"busy\"}".into(),
    )]);
    let got = turn(
        &pmm,
        &[("OLLAMA_HOST", stub.url())],
        &["--adapter", "ollama", "--retries", "0", "hello"],
    );
    assert_eq!(got.0, 3, "{got:?}");
    assert!(got.2.contains("recorded as event"), "{}", got.2);
    let events = pmm.run("pmm-replay", &[], "").records();
    assert_eq!(
        kinds(&events).last().map(String::as_str),
        Some("generation_failure")
    );
    // A server whose check is inconclusive (a 5xx) is asked anyway.
    let stub = Stub::start_with(
        vec![StubResponse::Ollama("fine".into())],
        Preflight::Status(500, "{}".into()),
    );
    let got = turn(
        &pmm,
        &[("OLLAMA_HOST", stub.url())],
        &["--adapter", "ollama", "hello"],
    );
    assert_eq!(got.0, 0, "{got:?}");
}

#[test]
fn a_truncated_reply_keeps_its_finish_reason_and_says_so() {
    let pmm = Pmm::new();
    let ollama = Stub::start(vec![
        StubResponse::OllamaReason(
            "The answer is a long one that was cut".into(),
            "length".into(),
        ),
        StubResponse::Ollama("Whole.".into()),
    ]);
    let env = [("OLLAMA_HOST", ollama.url())];
    let (code, stdout, stderr) = turn(
        &pmm,
        &env,
        &["--adapter", "ollama", "--max-tokens", "8", "hi"],
    );
    assert_eq!(code, 0, "{stderr}");
    let recs: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reply = recs
        .iter()
        .find(|r| r["kind"] == "assistant_message")
        .unwrap();
    assert_eq!(reply["meta"]["finish_reason"], "length");
    assert_eq!(
        reply["content"], "The answer is a long one that was cut",
        "kept as it came"
    );
    assert_eq!(turn_record(&recs)["truncated"], true);
    // --text shows it; a whole reply shows nothing more, and has no "truncated".
    let (code, stdout, _) = turn(&pmm, &env, &["--adapter", "ollama", "--text", "again"]);
    assert_eq!(code, 0);
    assert_eq!(stdout, "Whole.\n");
    let (_, stdout, _) = turn(&pmm, &env, &["--adapter", "ollama", "again"]);
    let recs: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(turn_record(&recs).get("truncated").is_none());
    let reply = recs
        .iter()
        .find(|r| r["kind"] == "assistant_message")
        .unwrap();
    assert_eq!(reply["meta"]["finish_reason"], "stop");

    let openai = Stub::start(vec![StubResponse::OpenAiReason(
        "Cut sh".into(),
        "length".into(),
    )]);
    let env = [("OPENAI_BASE_URL", format!("{}/v1", openai.url()))];
    let (code, stdout, stderr) = turn(&pmm, &env, &["--adapter", "openai", "--text", "hi"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "Cut sh\n[truncated]\n");
    let events = pmm
        .run("pmm-replay", &["--kind", "assistant_message"], "")
        .records();
    assert_eq!(events.last().unwrap()["meta"]["finish_reason"], "length");

    // The Markdown transcript: exchanges numbered, provider and model named, [truncated].
    let md = pmm.run("pmm-export", &["--format", "md"], "");
    assert_eq!(md.code, 0, "{md:?}");
    assert!(
        md.stdout
            .contains("### Turn 4: 🤖 Assistant (openai · stub-gpt)"),
        "{}",
        md.stdout
    );
    assert!(
        md.stdout.contains("Cut sh\n[truncated]\n```"),
        "{}",
        md.stdout
    );
    assert!(
        md.stdout
            .contains("### Turn 1: 🤖 Assistant (ollama · stub-llama:latest)"),
        "{}",
        md.stdout
    );
    assert!(!md.stdout.contains("Turn 5"), "{}", md.stdout);
}

#[test]
fn markdown_shows_failed_turns() {
    let pmm = Pmm::new();
    let stub = Stub::start(vec![StubResponse::Status(
        500,
        "{\"error\":\"boom\"}".into(),
    )]);
    let got = turn(
        &pmm,
        &[("OLLAMA_HOST", stub.url())],
        &["--adapter", "ollama", "--retries", "0", "hello"],
    );
    assert_eq!(got.0, 3, "{got:?}");
    let md = pmm.run("pmm-export", &["--format", "md"], "");
    assert_eq!(md.code, 0, "{md:?}");
    assert!(md.stdout.contains("### Turn 1: 👤 User"), "{}", md.stdout);
    assert!(
        md.stdout
            .contains("### Turn 1: ⚠️ No reply: the model failed (ollama · llama3.2)"),
        "{}",
        md.stdout
    );
    assert!(md.stdout.contains("HTTP 500: boom"), "{}", md.stdout);
}

#[test]
fn an_echoed_template_opens_nothing_and_is_counted() {
    let pmm = Pmm::new();
    // An old message holding a marker line, recalled into the system prompt's evidence
    // (three exchanges later, it is no longer in the chat history).
    let r = pmm.run(
        "pmm-append",
        &[
            "--kind",
            "user_message",
            "--content",
            "About the plants:\nCOMMIT: water the plants",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    for m in ["one", "two", "three"] {
        let r = pmm.run("pmm-turn", &["--adapter", "dummy", m], "");
        assert_eq!(r.code, 0, "{r:?}");
    }
    // The model repeats its context, and adds one promise of its own.
    let prompt = pmm.path("prompt.json");
    let command = format!(
        "cat > '{}'; printf 'Sure.\\nCOMMIT: water the plants\\n  COMMIT: water the plants  \\nCOMMIT: a real new promise\\n'",
        prompt.display()
    );
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "cmd",
            "--command",
            &command,
            "what about the plants?",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let sent: Value = serde_json::from_slice(&std::fs::read(&prompt).unwrap()).unwrap();
    let system = sent["system"].as_str().unwrap();
    assert!(
        system.lines().any(|l| l == "COMMIT: water the plants"),
        "the evidence holds the marker line: {system}"
    );
    let recs = r.records();
    let rec = turn_record(&recs);
    let opened: Vec<Value> = recs
        .iter()
        .filter(|e| e["kind"] == "commitment_open")
        .map(|e| e["meta"]["text"].clone())
        .collect();
    assert_eq!(opened, vec![Value::from("a real new promise")], "{rec}");
    assert_eq!(rec["markers_echoed"], 2, "{rec}");

    // A model that answers with its whole rules text opens, closes, claims and cites nothing.
    let script = pmm.path("rules.jsonl");
    let mut lines = String::new();
    for _ in 0..6 {
        lines.push_str(&format!(
            "{}\n",
            Value::String(pmm::context::render::RULES.into())
        ));
    }
    std::fs::write(&script, lines).unwrap();
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "rules?",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let recs = r.records();
    let rec = turn_record(&recs);
    assert_eq!(
        (rec["opened"].clone(), rec["closed"].clone()),
        (json!([]), json!([])),
        "{rec}"
    );
    assert_eq!(rec["claims"], json!({"failed": [], "valid": []}), "{rec}");
    assert!(
        kinds(&recs).iter().all(|k| k != "inter_ledger_ref"),
        "{rec}"
    );

    // The old template line, echoed by a model, opens nothing either: the rules no longer
    // hold it, and nothing else opens "<what you will do>".
    let ollama = Stub::start(vec![StubResponse::Ollama(
        "I follow these rules.\nCOMMIT: <what you will do>            opens a commitment".into(),
    )]);
    let r2 = turn(
        &pmm,
        &[("OLLAMA_HOST", ollama.url())],
        &["--adapter", "ollama", "rules?"],
    );
    assert_eq!(r2.0, 0, "{r2:?}");
    let sent = &ollama.requests()[0].body["messages"][0]["content"];
    assert!(!sent.as_str().unwrap().contains("\nCOMMIT:"), "{sent}");
}

#[test]
fn an_echoed_key_is_scrubbed_from_the_ledger_and_the_output() {
    const KEY: &str = "sk-live-echo-0123456789abcdef";
    let pmm = Pmm::new();
    let stub = Stub::start(vec![StubResponse::EchoAuth]);
    let env = [
        ("OPENAI_BASE_URL", format!("{}/v1", stub.url())),
        ("OPENAI_API_KEY", KEY.to_string()),
    ];
    let (code, stdout, stderr) = turn(&pmm, &env, &["--adapter", "openai", "who am I?"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stub.requests()[0].header("authorization"),
        Some(&*format!("Bearer {KEY}")),
        "the key was sent"
    );
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY),
        "{stdout}{stderr}"
    );
    assert!(stdout.contains("Authorization: Bearer ***"), "{stdout}");
    let (code, text, _) = turn(&pmm, &env, &["--adapter", "openai", "--text", "again"]);
    assert_eq!(code, 0);
    assert!(!text.contains(KEY) && text.contains("***"), "{text}");
    // Nothing anywhere in the ledger, its exports or its file.
    let all = pmm.run("pmm-replay", &[], "");
    assert!(!all.stdout.contains(KEY), "{}", all.stdout);
    for format in ["md", "jsonl"] {
        let e = pmm.run("pmm-export", &["--format", format], "");
        assert_eq!(e.code, 0, "{e:?}");
        assert!(!e.stdout.contains(KEY), "{format}: {}", e.stdout);
    }
    let raw = std::fs::read(&pmm.db).unwrap();
    assert!(
        !raw.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
        "the key is in the SQLite file"
    );
    // The commitment the echo opened holds no key either.
    let opened: Vec<Value> = all
        .records()
        .into_iter()
        .filter(|e| e["kind"] == "commitment_open")
        .collect();
    assert!(!opened.is_empty());
    assert!(opened.iter().all(|e| !e.to_string().contains(KEY)));
}

#[test]
fn a_bad_openai_base_url_is_blamed_on_the_variable() {
    let pmm = Pmm::new();
    let got = turn(
        &pmm,
        &[("OPENAI_BASE_URL", "localhost:8080/v1".into())],
        &["--adapter", "openai", "hi"],
    );
    assert_eq!(got.0, 2, "{got:?}");
    assert!(
        got.2.contains("OPENAI_BASE_URL 'localhost:8080/v1'"),
        "{}",
        got.2
    );
    assert!(!got.2.contains("--adapter"), "{}", got.2);
    assert!(!pmm.db.exists());
    let got = turn(
        &pmm,
        &[("OLLAMA_HOST", "ftp://box".into())],
        &["--adapter", "ollama", "hi"],
    );
    assert_eq!(got.0, 2, "{got:?}");
    assert!(got.2.contains("OLLAMA_HOST"), "{}", got.2);
}

#[test]
fn a_base_url_ending_in_chat_completions_is_not_doubled() {
    let pmm = Pmm::new();
    let stub = Stub::start(vec![StubResponse::OpenAi("ok".into())]);
    for base in [
        format!("{}/v1/chat/completions", stub.url()),
        format!("{}/v1/chat/completions/", stub.url()),
    ] {
        let got = turn(
            &pmm,
            &[("OPENAI_BASE_URL", base)],
            &["--adapter", "openai", "--text", "hi"],
        );
        assert_eq!(got.0, 0, "{got:?}");
        assert_eq!(got.1, "ok\n");
    }
    assert!(stub
        .requests()
        .iter()
        .all(|r| r.path == "/v1/chat/completions"));
    assert!(stub
        .preflights()
        .iter()
        .all(|r| r.path.starts_with("/v1/models")));
}

#[test]
fn an_ollama_host_that_speaks_openai_suggests_the_openai_adapter() {
    let pmm = Pmm::new();
    let stub = Stub::start_with(
        vec![StubResponse::OpenAi("never".into())],
        Preflight::OpenAiOnly,
    );
    let got = turn(
        &pmm,
        &[("OLLAMA_HOST", stub.url())],
        &["--adapter", "ollama", "hi"],
    );
    let want = format!("OPENAI_BASE_URL={}/v1", stub.url());
    assert_preflight_failure(&pmm, got, &["HTTP 404", "--adapter openai", &want], 0);
    assert!(stub.requests().is_empty());
    // A server that speaks neither: say so.
    let stub = Stub::start_with(
        vec![StubResponse::OpenAi("never".into())],
        Preflight::Status(404, "nope".into()),
    );
    let got = turn(
        &pmm,
        &[("OLLAMA_HOST", stub.url())],
        &["--adapter", "ollama", "hi"],
    );
    assert_preflight_failure(&pmm, got, &["does not look like an Ollama server"], 0);
}

#[test]
fn an_openai_base_url_without_v1_says_to_add_it() {
    let pmm = Pmm::new();
    let stub = Stub::start_with(
        vec![StubResponse::OpenAi("never".into())],
        Preflight::OpenAiOnly,
    );
    // OpenAiOnly serves /v1/models; /models at the root is a 404.
    let got = turn(
        &pmm,
        &[("OPENAI_BASE_URL", stub.url())],
        &["--adapter", "openai", "hi"],
    );
    let want = format!("OPENAI_BASE_URL={}/v1", stub.url());
    assert_preflight_failure(&pmm, got, &["must include /v1", &want], 0);
}
