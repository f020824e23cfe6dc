//! pmm-mcp --http (issue 36): the same server over MCP's Streamable HTTP transport, behind a
//! door of bearer tokens, Host/Origin checks and limits. The real server is started on a free
//! loopback port; curl plays the hostile client, the official MCP Python SDK
//! (`tests/mcp_http_client.py`) the well-behaved one.

use crate::harness::{present_or_skip, tool_or_skip, Pmm};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `pmm-mcp --http`, killed when dropped.
struct HttpServer {
    child: Child,
    /// `127.0.0.1:PORT`.
    addr: String,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl HttpServer {
    fn start(pmm: &Pmm, args: &[&str]) -> HttpServer {
        let mut child = pmm
            .std_cmd("pmm-mcp")
            .args(["--http", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pmm-mcp --http");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        // The banner names the address (other lines may come first: an index catching up).
        let mut first = String::new();
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 {
                let _ = child.wait();
                panic!("pmm-mcp --http ended: {first}");
            }
            first.push_str(&line);
            if line.contains("http://") {
                first = line;
                break;
            }
        }
        let addr = first
            .split("http://")
            .nth(1)
            .and_then(|s| s.split("/mcp").next())
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_string();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(first));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while err.read_line(&mut line).is_ok_and(|n| n > 0) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        HttpServer {
            child,
            addr,
            stderr,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tokens_file(pmm: &Pmm) -> PathBuf {
    pmm.path("tokens.json")
}

/// `pmm-mcp --new-token NAME --scope SCOPE`: its secret.
fn new_token(pmm: &Pmm, name: &str, scope: &str) -> String {
    let file = tokens_file(pmm);
    let r = pmm.run(
        "pmm-mcp",
        &[
            "--new-token",
            name,
            "--scope",
            scope,
            "--tokens",
            file.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["name"], name);
    assert_eq!(v["scope"], scope);
    v["token"].as_str().unwrap().to_string()
}

/// A server of `pmm`'s ledger with its tokens file.
fn start(pmm: &Pmm, extra: &[&str]) -> HttpServer {
    let file = tokens_file(pmm);
    let mut args = vec!["--tokens", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    HttpServer::start(pmm, &args)
}

#[derive(Debug)]
struct Reply {
    status: u16,
    /// The response's head, lower-cased.
    head: String,
    body: String,
}

/// curl ARGS, with `-i`; the last response.
fn curl(args: &[&str]) -> Reply {
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "60"])
        .args(args)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // With 100-continue or redirects curl prints several heads: take the last one.
    let start = text.rfind("HTTP/1.1 ").unwrap_or_else(|| {
        panic!(
            "no response: {text:?} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let rest = &text[start..];
    let (head, body) = rest.split_once("\r\n\r\n").unwrap_or((rest, ""));
    Reply {
        status: head[9..12].parse().unwrap(),
        head: head.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#;

/// POST `body` to the endpoint as an MCP client would, with `headers`.
fn post(s: &HttpServer, headers: &[String], body: &str) -> Reply {
    let mut args: Vec<String> = vec![
        "-X".into(),
        "POST".into(),
        s.url(),
        "-H".into(),
        "Content-Type: application/json".into(),
        "-H".into(),
        "Accept: application/json, text/event-stream".into(),
        "--data-binary".into(),
        body.into(),
    ];
    for h in headers {
        args.push("-H".into());
        args.push(h.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    curl(&args)
}

fn bearer(secret: &str) -> String {
    format!("Authorization: Bearer {secret}")
}

fn curl_or_skip(why: &str) -> bool {
    tool_or_skip("curl", why)
}

fn python_mcp_or_skip(why: &str) -> bool {
    if !tool_or_skip("python3", why) {
        return false;
    }
    let ok = Command::new("python3")
        .args(["-c", "import mcp.client.streamable_http"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    present_or_skip(ok, "the MCP Python SDK (python3 -m pip install mcp)", why)
}

fn client_cmd(s: &HttpServer, secret: &str, mode: &str, args: &[&str]) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_http_client.py");
    let mut c = Command::new("python3");
    c.arg(script)
        .arg(mode)
        .arg(s.url())
        .args(args)
        .env("PMM_TOKEN", secret);
    c
}

fn client(s: &HttpServer, secret: &str, mode: &str, args: &[&str]) -> Vec<Value> {
    let out = client_cmd(s, secret, mode, args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client {mode}: {}\nstdout: {stdout}\nstderr: {}\nserver: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        s.stderr()
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn calls<'a>(recs: &'a [Value], tool: &str) -> Vec<&'a Value> {
    recs.iter()
        .filter(|r| r["step"] == "call" && r["tool"] == tool)
        .collect()
}

fn events(pmm: &Pmm) -> Vec<Value> {
    let r = pmm.run("pmm-replay", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
}

fn verify_clean(pmm: &Pmm) {
    let v = pmm.run("pmm-verify", &["--quiet"], "");
    assert_eq!(v.code, 0, "pmm-verify: {v:?}");
}

#[test]
fn mcp_http_the_python_sdk_uses_the_tools_and_resources_and_writes_carry_the_token_name() {
    if !python_mcp_or_skip("the pmm-mcp --http session test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    let s = start(&pmm, &[]);
    let recs = client(&s, &secret, "session", &[]);
    let tools = &recs.iter().find(|r| r["step"] == "list_tools").unwrap()["tools"];
    for t in [
        "recall", "remember", "commit", "close", "state", "events", "prove", "verify",
    ] {
        assert!(tools.as_array().unwrap().iter().any(|x| x == t), "{tools}");
    }
    for r in recs.iter().filter(|r| r["step"] == "call") {
        assert_eq!(r["is_error"], false, "{r}");
    }
    let recall = calls(&recs, "recall")[0];
    assert!(
        recall["text"].as_str().unwrap().contains("blue folder"),
        "{recall}"
    );
    let state = recs
        .iter()
        .find(|r| r["step"] == "read_resource" && r["uri"] == "pmm://state")
        .unwrap();
    assert!(state["value"].is_object(), "{state}");
    let all = events(&pmm);
    let note = all
        .iter()
        .find(|e| e["content"] == "The quarterly report lives in the blue folder.")
        .unwrap();
    assert_eq!(note["meta"]["source"], "mcp:laptop", "{note}");
    assert!(all
        .iter()
        .any(|e| e["kind"] == "commitment_open" && e["meta"]["source"] == "mcp:laptop"));
    verify_clean(&pmm);
}

#[test]
fn mcp_http_a_read_token_lists_no_write_tool_and_its_writes_are_tool_errors() {
    if !python_mcp_or_skip("the pmm-mcp --http read scope test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "viewer", "read");
    let s = start(&pmm, &[]);
    let recs = client(&s, &secret, "readonly", &[]);
    let tools = recs.iter().find(|r| r["step"] == "list_tools").unwrap()["tools"].clone();
    assert!(
        !tools.as_array().unwrap().iter().any(|t| t == "remember"),
        "{tools}"
    );
    for t in ["remember", "commit", "close"] {
        let r = calls(&recs, t)[0];
        assert_eq!(r["is_error"], true, "{r}");
        assert!(r["text"].as_str().unwrap().contains("read-scoped"), "{r}");
    }
    assert_eq!(calls(&recs, "recall")[0]["is_error"], false);
    assert!(!events(&pmm)
        .iter()
        .any(|e| e["content"] == "a read token must not write this"));
}

#[test]
fn mcp_http_no_wrong_or_revoked_token_is_401_with_the_resource_metadata() {
    if !curl_or_skip("the pmm-mcp --http 401 test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    let s = start(&pmm, &[]);
    let meta_url = format!(
        "www-authenticate: bearer resource_metadata=\"http://{}/.well-known/oauth-protected-resource\"",
        s.addr
    );
    for headers in [
        vec![],
        vec![bearer("pmm_not-a-token")],
        vec!["Authorization: Basic eDp5".to_string()],
    ] {
        let r = post(&s, &headers, INIT);
        assert_eq!(r.status, 401, "{headers:?}: {r:?}");
        assert!(r.head.contains(&meta_url), "{r:?}");
    }
    let ok = post(&s, &[bearer(&secret)], INIT);
    assert_eq!(ok.status, 200, "{ok:?}");
    assert!(ok.head.contains("mcp-session-id"), "{ok:?}");

    // The protected-resource metadata (RFC 9728) is served to anyone.
    let m = curl(&[&format!(
        "http://{}/.well-known/oauth-protected-resource",
        s.addr
    )]);
    assert_eq!(m.status, 200, "{m:?}");
    let doc: Value = serde_json::from_str(&m.body).unwrap();
    assert_eq!(doc["resource"], s.url());
    assert_eq!(
        doc["bearer_methods_supported"],
        serde_json::json!(["header"])
    );

    // Revoked while the server runs: refused from the next request on.
    let file = tokens_file(&pmm);
    let r = pmm.run(
        "pmm-mcp",
        &["--revoke", "laptop", "--tokens", file.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let gone = post(&s, &[bearer(&secret)], INIT);
    assert_eq!(gone.status, 401, "{gone:?}");
    assert!(gone.head.contains("error=\"invalid_token\""), "{gone:?}");
    // The secret is in no log and not in the file.
    assert!(!s.stderr().contains(&secret));
    assert!(!std::fs::read_to_string(&file).unwrap().contains(&secret));
}

#[test]
fn mcp_http_the_tokens_file_keeps_only_hashes_and_is_private() {
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "a", "read");
    let file = tokens_file(&pmm);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        !text.contains(&secret) && text.contains("\"sha256\""),
        "{text}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A second token of the same name is refused, the file unchanged.
    let f = file.to_str().unwrap();
    let r = pmm.run(
        "pmm-mcp",
        &["--new-token", "a", "--scope", "write", "--tokens", f],
        "",
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    let r = pmm.run("pmm-mcp", &["--revoke", "nobody", "--tokens", f], "");
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn mcp_http_a_foreign_host_or_origin_is_403() {
    if !curl_or_skip("the pmm-mcp --http Host test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    let s = start(&pmm, &["--allowed-host", "mind.example"]);
    for h in [
        "Host: evil.example",
        "Origin: http://evil.example",
        "Origin: null",
    ] {
        let r = post(&s, &[bearer(&secret), h.to_string()], INIT);
        assert_eq!(r.status, 403, "{h}: {r:?}");
    }
    // Refused before the token is even looked at: no token, foreign host → 403 too.
    assert_eq!(post(&s, &["Host: evil.example".into()], INIT).status, 403);
    for h in [
        "Host: localhost",
        "Host: mind.example",
        "Origin: http://localhost:3000",
    ] {
        let r = post(&s, &[bearer(&secret), h.to_string()], INIT);
        assert_eq!(r.status, 200, "{h}: {r:?}");
    }
}

#[test]
fn mcp_http_a_100_mb_body_is_413_and_the_server_keeps_serving() {
    if !curl_or_skip("the pmm-mcp --http body limit test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    let s = start(&pmm, &[]);
    // Streamed (chunked, no Content-Length): the limit holds while reading, not only on the
    // declared length.
    let mut c = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "60", "-X", "POST", "-T", "-"])
        .arg(s.url())
        .args(["-H", "Content-Type: application/json"])
        .args(["-H", "Accept: application/json, text/event-stream"])
        .args(["-H", &bearer(&secret)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = c.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..100 {
            if stdin.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let out = c.wait_with_output().unwrap();
    feeder.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(" 413 "),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Declared too large: refused before a byte of it is read.
    let big = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
        .arg(s.url())
        .args(["-H", &bearer(&secret), "-H", "Content-Length: 104857600"])
        .args(["--data-binary", "x", "--max-time", "20"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&big.stdout), "413");
    assert_eq!(post(&s, &[bearer(&secret)], INIT).status, 200);
}

#[test]
fn mcp_http_10000_headers_and_a_slow_client_do_not_stop_the_server() {
    if !curl_or_skip("the pmm-mcp --http header limit test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    let s = start(&pmm, &[]);
    // A client that sends a byte now and then and never finishes its head.
    let mut slow = std::net::TcpStream::connect(&s.addr).unwrap();
    slow.write_all(b"POST /mcp HTTP/1.1\r\nHo").unwrap();
    let mut args: Vec<String> = vec![];
    for i in 0..10_000 {
        args.push("-H".into());
        args.push(format!("X-Junk-{i}: {i}"));
    }
    let mut all: Vec<String> = vec!["-X".into(), "POST".into(), s.url()];
    all.extend(args);
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let r = curl(&all);
    assert_eq!(r.status, 431, "{r:?}");
    let started = Instant::now();
    assert_eq!(post(&s, &[bearer(&secret)], INIT).status, 200);
    assert!(started.elapsed() < Duration::from_secs(5));
    // Malformed JSON is a JSON-RPC error, not a dead server.
    let bad = post(&s, &[bearer(&secret)], "{not json");
    assert!(bad.status >= 400 && bad.status < 500, "{bad:?}");
    assert_eq!(post(&s, &[bearer(&secret)], INIT).status, 200);
    drop(slow);
}

#[test]
fn mcp_http_abandoned_sessions_are_bounded_per_token() {
    if !curl_or_skip("the pmm-mcp --http session bound test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    let other = new_token(&pmm, "desk", "write");
    let s = start(&pmm, &["--sessions-per-token", "4"]);
    let mine = post(&s, &[bearer(&other)], INIT);
    let sid = |r: &Reply| {
        r.head
            .lines()
            .find_map(|l| l.strip_prefix("mcp-session-id: "))
            .unwrap()
            .trim()
            .to_string()
    };
    let mine = sid(&mine);
    let mut first = None;
    for _ in 0..40 {
        let r = post(&s, &[bearer(&secret)], INIT);
        assert_eq!(r.status, 200, "{r:?}");
        first.get_or_insert(sid(&r));
    }
    let ping = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let hdr = |id: &str| format!("Mcp-Session-Id: {id}");
    // The oldest of 40 was closed to make room; the other token's session is untouched, and
    // one token cannot use another's session.
    let old = post(&s, &[bearer(&secret), hdr(first.as_ref().unwrap())], ping);
    assert_eq!(old.status, 404, "{old:?}");
    let desk = post(&s, &[bearer(&other), hdr(&mine)], ping);
    assert!(desk.status == 200 || desk.status == 202, "{desk:?}");
    let stolen = post(&s, &[bearer(&secret), hdr(&mine)], ping);
    assert_eq!(stolen.status, 404, "{stolen:?}");
}

#[test]
fn mcp_http_8_clients_remembering_beside_pmm_append_write_every_text_once() {
    if !python_mcp_or_skip("the pmm-mcp --http concurrency test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    let s = start(&pmm, &[]);
    let clients: Vec<Child> = (0..8)
        .map(|c| {
            client_cmd(&s, &secret, "remember", &["20", &format!("client{c}")])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut appended = 0;
    let started = Instant::now();
    while appended < 20 || started.elapsed() < Duration::from_secs(1) {
        let line = format!(
            "{{\"kind\":\"reflection\",\"content\":\"append-{appended}\",\"meta\":{{\"source\":\"test\"}}}}\n"
        );
        let r = pmm.run("pmm-append", &[], &line);
        assert_eq!(r.code, 0, "{r:?}");
        appended += 1;
        if appended > 200 {
            break;
        }
    }
    for c in clients {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "client: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rec: Value = serde_json::from_slice(out.stdout.trim_ascii()).unwrap();
        assert_eq!(rec["errors"], serde_json::json!([]), "{rec}");
    }
    verify_clean(&pmm);
    let all = events(&pmm);
    for c in 0..8 {
        for i in 0..20 {
            let text = format!("client{c}-{i}");
            let n = all.iter().filter(|e| e["content"] == text.as_str()).count();
            assert_eq!(n, 1, "{text} is there {n} times");
        }
    }
    for i in 0..appended {
        let text = format!("append-{i}");
        assert_eq!(
            all.iter().filter(|e| e["content"] == text.as_str()).count(),
            1
        );
    }
}

#[test]
fn mcp_http_sigterm_finishes_and_exits_0() {
    if !curl_or_skip("the pmm-mcp --http SIGTERM test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    let mut s = start(&pmm, &[]);
    assert_eq!(post(&s, &[bearer(&secret)], INIT).status, 200);
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(s.child.id() as i32, libc::SIGTERM);
    }
    let started = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{}", s.stderr());
}

#[test]
fn mcp_http_refuses_plain_http_off_loopback_and_needs_tokens() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm-mcp", &["--http", "0.0.0.0:0", "--no-auth"], "");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("loopback"), "{r:?}");
    new_token(&pmm, "a", "read");
    let f = tokens_file(&pmm);
    let r = pmm.run(
        "pmm-mcp",
        &["--http", "0.0.0.0:0", "--tokens", f.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("in clear"), "{r:?}");
    let r = pmm.run("pmm-mcp", &["--http", "127.0.0.1:0"], "");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--tokens"), "{r:?}");
}
