//! pmm-mcp --http (issue 36): the same server over MCP's Streamable HTTP transport, behind a
//! door of bearer tokens, Host/Origin checks and limits. The real server is started on a free
//! loopback port; curl plays the hostile client, the official MCP Python SDK
//! (`tests/mcp_http_client.py`) the well-behaved one.

mod hostile;

use crate::harness::{present_or_skip, tool_or_skip, Pmm};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `pmm-mcp --http`, killed when dropped.
struct HttpServer {
    child: Child,
    /// `127.0.0.1:PORT`.
    addr: String,
    /// `http` or `https`.
    scheme: String,
    /// The certificate curl and the Python client trust (a self-signed `https` server).
    ca: Option<PathBuf>,
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
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = stderr.clone();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            let mut line = String::new();
            while err.read_line(&mut line).is_ok_and(|n| n > 0) {
                sink.lock().unwrap().push_str(&line);
                let _ = tx.send(std::mem::take(&mut line));
            }
        });
        // The banner names the address, http:// or https:// (other lines may come first: an
        // index catching up). Waited for with a deadline: a server that never says where it
        // listens fails the test instead of hanging it.
        let deadline = Instant::now() + Duration::from_secs(60);
        let banner = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains("://") && line.contains("/mcp") => break line,
                Ok(_) => continue,
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "pmm-mcp --http named no address ({e}): {}",
                        stderr.lock().unwrap()
                    );
                }
            }
        };
        let (scheme, rest) = banner
            .split_once("://")
            .map(|(a, b)| (a.rsplit(' ').next().unwrap_or(a), b))
            .unwrap();
        let addr = rest
            .split("/mcp")
            .next()
            .unwrap_or_else(|| panic!("no address in {banner:?}"))
            .to_string();
        HttpServer {
            child,
            addr,
            scheme: scheme.to_string(),
            ca: None,
            stderr,
        }
    }

    fn url(&self) -> String {
        format!("{}://{}/mcp", self.scheme, self.addr)
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
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
    if let Some(ca) = &s.ca {
        args.push("--cacert".into());
        args.push(ca.display().to_string());
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

fn have_python_mcp() -> bool {
    Command::new("python3")
        .args(["-c", "import mcp.client.streamable_http"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn python_mcp_or_skip(why: &str) -> bool {
    if !tool_or_skip("python3", why) {
        return false;
    }
    present_or_skip(
        have_python_mcp(),
        "the MCP Python SDK (python3 -m pip install mcp)",
        why,
    )
}

fn client_cmd(s: &HttpServer, secret: &str, mode: &str, args: &[&str]) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_http_client.py");
    let mut c = Command::new("python3");
    c.arg(script)
        .arg(mode)
        .arg(s.url())
        .args(args)
        .env("PMM_TOKEN", secret);
    if let Some(ca) = &s.ca {
        c.env("PMM_CA", ca);
    }
    c
}

/// `c`'s output, or a failed test when it has not ended within `limit` (it is killed): nothing
/// here can hang the suite.
fn output_within(mut c: Command, limit: Duration) -> std::process::Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pipe = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = vec![];
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = pipe(child.stdout.take().map(|p| Box::new(p) as _));
    let err = pipe(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{c:?} did not end within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&err.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn client(s: &HttpServer, secret: &str, mode: &str, args: &[&str]) -> Vec<Value> {
    let out = output_within(client_cmd(s, secret, mode, args), Duration::from_secs(180));
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

/// Whether `child` has ended, without reaping it (so its output can still be collected).
fn child_done(child: &Child) -> bool {
    // SAFETY: waitid on our own child's pid with WNOWAIT only inspects its state.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            child.id(),
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r == 0 && info.si_pid() != 0
    }
}

#[test]
fn mcp_http_8_clients_x_100_remembers_beside_pmm_append_and_pmm_tick_write_every_text_once() {
    if !python_mcp_or_skip("the pmm-mcp --http concurrency test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    // Every writer waits up to a minute for the lock: the test is about what is written, and a
    // loaded machine (CI, other builds) can stretch a tick's transaction past the default 5 s.
    const BUSY: &str = "60000";
    let s = start(&pmm, &["--busy-timeout", BUSY]);
    let clients: Vec<Child> = (0..8)
        .map(|c| {
            client_cmd(&s, &secret, "remember", &["100", &format!("client{c}")])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // pmm-append in a loop on one thread, pmm-tick in a loop on this one, both until the
    // clients are done.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let done = done.clone();
        let env = (pmm.db.clone(), pmm.dir.path().to_path_buf());
        std::thread::spawn(move || {
            let mut appended = 0;
            while appended < 20 || !done.load(std::sync::atomic::Ordering::SeqCst) {
                let line = format!(
                    "{{\"kind\":\"reflection\",\"content\":\"append-{appended}\",\"meta\":{{\"source\":\"test\"}}}}\n"
                );
                let mut c = Command::new(assert_cmd::cargo::cargo_bin("pmm-append"))
                    .args(["--busy-timeout", BUSY])
                    .current_dir(&env.1)
                    .env("PMM_DB", &env.0)
                    .env("PMM_NOW", "2025-11-24T05:55:41.194157Z")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                c.stdin.take().unwrap().write_all(line.as_bytes()).unwrap();
                let out = c.wait_with_output().unwrap();
                assert!(
                    out.status.success(),
                    "pmm-append: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                appended += 1;
            }
            appended
        })
    };
    let started = Instant::now();
    let mut slot = 1;
    while slot <= 3 || !clients.iter().all(child_done) {
        let t = pmm.run(
            "pmm-tick",
            &["--slot", &slot.to_string(), "--busy-timeout", BUSY],
            "",
        );
        assert_eq!(t.code, 0, "pmm-tick: {t:?}");
        slot += 1;
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the clients did not finish in 10 minutes; server: {}",
            s.stderr()
        );
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let appended = appender.join().unwrap();
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
    let mut seen = std::collections::HashMap::new();
    for e in &all {
        if let Some(t) = e["content"].as_str() {
            *seen.entry(t.to_string()).or_insert(0) += 1;
        }
    }
    for c in 0..8 {
        for i in 0..100 {
            let text = format!("client{c}-{i}");
            let n = seen.get(&text).copied().unwrap_or(0);
            assert_eq!(n, 1, "{text} is there {n} times");
        }
    }
    for i in 0..appended {
        let text = format!("append-{i}");
        assert_eq!(seen.get(&text), Some(&1), "{text}");
    }
    let ticks = all.iter().filter(|e| e["kind"] == "autonomy_tick").count();
    assert!(ticks >= 3, "{ticks} ticks in the ledger");
    eprintln!(
        "8 x 100 remembers beside {appended} appends and {} ticks",
        slot - 1
    );
}

/// SIGKILL while clients write: every remember that was answered is in the ledger once, no
/// event is half there (the chain verifies), and a new server on the ledger serves again.
#[test]
fn mcp_http_a_server_killed_mid_write_keeps_every_answered_remember_and_nothing_partial() {
    if !python_mcp_or_skip("the pmm-mcp --http SIGKILL test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    let mut s = start(&pmm, &[]);
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut clients = vec![];
    let mut readers = vec![];
    for c in 0..4 {
        let mut child = client_cmd(&s, &secret, "acked", &["100000", &format!("k{c}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let acked = acked.clone();
        readers.push(std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if let Some(t) = v["acked"].as_str() {
                        acked.lock().unwrap().push(t.to_string());
                    }
                }
            }
        }));
        clients.push(child);
    }
    let started = Instant::now();
    while acked.lock().unwrap().len() < 120 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the clients wrote too little: {}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // SIGKILL, with writes in flight from four clients.
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    for mut c in clients {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !child_done(&c) {
            if Instant::now() > deadline {
                let _ = c.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.wait();
    }
    for r in readers {
        r.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    verify_clean(&pmm);
    let all = events(&pmm);
    let mut seen = std::collections::HashMap::new();
    for e in &all {
        if let Some(t) = e["content"].as_str() {
            *seen.entry(t.to_string()).or_insert(0) += 1;
        }
    }
    for t in &acked {
        assert_eq!(seen.get(t), Some(&1), "the answered remember {t:?}");
    }
    // At most the calls in flight were written and not answered: one per client.
    let written = seen
        .keys()
        .filter(|t| (0..4).any(|c| t.starts_with(&format!("k{c}-"))))
        .count();
    assert!(
        written >= acked.len() && written <= acked.len() + 4,
        "{written} written, {} answered",
        acked.len()
    );
    // The ledger serves a new server as it was.
    let s = start(&pmm, &[]);
    let recs = client(&s, &secret, "remember", &["3", "after"]);
    assert_eq!(recs[0]["errors"], serde_json::json!([]));
    verify_clean(&pmm);
    eprintln!(
        "{} answered remembers before SIGKILL, {written} written",
        acked.len()
    );
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

/// One request on a new connection (`Connection: close`), the whole answer read: the status
/// and the raw text.
fn raw_request(addr: &str, method: &str, headers: &[String], body: &str) -> (u16, String) {
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    req.push_str(body);
    c.write_all(req.as_bytes()).unwrap();
    let mut out = vec![];
    c.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

fn vm_rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Whether the peer closes `c` within `limit` (EOF or a reset), whatever it sent before.
fn closed_within(c: &mut std::net::TcpStream, limit: Duration) -> Option<(Duration, String)> {
    let started = Instant::now();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = vec![];
    let mut buf = [0u8; 4096];
    while started.elapsed() < limit {
        match c.read(&mut buf) {
            Ok(0) => return Some((started.elapsed(), String::from_utf8_lossy(&got).into())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some((started.elapsed(), String::from_utf8_lossy(&got).into())),
        }
    }
    None
}

/// Slowloris: one client sends its head a byte a second, another its body; the head's is
/// cut off at --header-timeout, the body's answered 408 at --body-timeout, and meanwhile
/// other clients are served at once.
#[test]
fn mcp_http_clients_sending_a_byte_a_second_are_cut_off_and_others_are_served() {
    if !curl_or_skip("the pmm-mcp --http slow client test") {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    let s = start(&pmm, &["--header-timeout", "3", "--body-timeout", "3"]);
    let dribble = |mut c: std::net::TcpStream, text: Vec<u8>| {
        std::thread::spawn(move || {
            for b in text {
                if c.write_all(&[b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    // The head, a byte a second (it would take a minute).
    let mut head = std::net::TcpStream::connect(&s.addr).unwrap();
    let head_writer = dribble(
        head.try_clone().unwrap(),
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nX-Slow: {}\r\n\r\n",
            s.addr,
            "z".repeat(40)
        )
        .into_bytes(),
    );
    // A whole head, then the body a byte a second.
    let mut body = std::net::TcpStream::connect(&s.addr).unwrap();
    body.write_all(
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\n{}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
            s.addr,
            bearer(&secret),
            INIT.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let body_writer = dribble(body.try_clone().unwrap(), INIT.as_bytes().to_vec());
    // Served meanwhile, each at once.
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(post(&s, &[bearer(&secret)], INIT).status, 200);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        std::thread::sleep(Duration::from_millis(500));
    }
    let (took, _) = closed_within(&mut head, Duration::from_secs(15))
        .expect("a head sent a byte a second is cut off");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let (took, answer) = closed_within(&mut body, Duration::from_secs(15))
        .expect("a body sent a byte a second is cut off");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    head_writer.join().unwrap();
    body_writer.join().unwrap();
    assert_eq!(post(&s, &[bearer(&secret)], INIT).status, 200);
}

/// 1,000 sessions opened (initialize) and never used again or deleted: a token keeps at most
/// --sessions-per-token of them (its oldest are ended), the server's memory stays small, and
/// another client's session works throughout.
#[test]
fn mcp_http_1000_abandoned_sessions_leave_the_server_serving_others() {
    if !curl_or_skip("the pmm-mcp --http abandoned sessions test") {
        return;
    }
    let pmm = Pmm::new();
    let bulk = new_token(&pmm, "bulk", "write");
    let desk = new_token(&pmm, "desk", "write");
    let s = start(&pmm, &[]);
    let sid_of = |text: &str| {
        text.lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("mcp-session-id: ")
                    .map(str::to_string)
            })
            .map(|v| v.trim().to_string())
    };
    let (st, text) = raw_request(&s.addr, "POST", &[bearer(&desk)], INIT);
    assert_eq!(st, 200, "{text}");
    let mine = sid_of(&text).unwrap();
    let rss_before = vm_rss_kib(s.pid());
    let mut ids = std::collections::HashSet::new();
    let mut first = None;
    let started = Instant::now();
    for i in 0..1000 {
        let (st, text) = raw_request(&s.addr, "POST", &[bearer(&bulk)], INIT);
        assert_eq!(st, 200, "session {i}: {text}");
        let sid = sid_of(&text).unwrap();
        first.get_or_insert(sid.clone());
        assert!(ids.insert(sid));
    }
    let took = started.elapsed();
    let rss_after = vm_rss_kib(s.pid());
    let ping = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let hdr = |id: &str| format!("Mcp-Session-Id: {id}");
    let (old, text) = raw_request(
        &s.addr,
        "POST",
        &[bearer(&bulk), hdr(first.as_ref().unwrap())],
        ping,
    );
    assert_eq!(
        old, 404,
        "the first of 1,000 sessions is still open: {text}"
    );
    let (st, text) = raw_request(&s.addr, "POST", &[bearer(&desk), hdr(&mine)], ping);
    assert!(st == 200 || st == 202, "{text}");
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let (st, text) = raw_request(&s.addr, "POST", &[bearer(&desk), hdr(&mine)], list);
    assert_eq!(st, 200, "{text}");
    assert!(text.contains("\"recall\""), "{text}");
    // 1,000 sessions held would be megabytes more; 32 are not.
    assert!(
        rss_after < rss_before + 32 * 1024,
        "RSS {rss_before} KiB before, {rss_after} KiB after 1,000 sessions"
    );
    if have_python_mcp() {
        let recs = client(&s, &desk, "remember", &["3", "desk"]);
        assert_eq!(recs[0]["errors"], serde_json::json!([]));
    }
    eprintln!("1,000 sessions in {took:?}; RSS {rss_before} KiB before, {rss_after} KiB after");
}

fn openssl_or_skip(why: &str) -> bool {
    tool_or_skip("openssl", why)
}

/// A self-signed certificate for localhost and 127.0.0.1 (cert.pem, key.pem in the workspace).
fn self_signed(pmm: &Pmm) -> (PathBuf, PathBuf) {
    let (cert, key) = (pmm.path("cert.pem"), pmm.path("key.pem"));
    let out = output_within(
        {
            let mut c = Command::new("openssl");
            c.args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ])
            .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert);
            c
        },
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// --tls-cert/--tls-key: HTTPS with a certificate made here. curl and the Python SDK trusting
/// it are served; a client that does not trust it, one that speaks plain HTTP and one that
/// stalls in the handshake each fail on their own, promptly, and stop nobody else.
#[test]
fn mcp_http_over_tls_serves_clients_that_trust_the_certificate_and_no_handshake_blocks_others() {
    if !curl_or_skip("the pmm-mcp --http TLS test")
        || !openssl_or_skip("the pmm-mcp --http TLS test")
    {
        return;
    }
    let pmm = Pmm::new();
    let secret = new_token(&pmm, "laptop", "write");
    let (cert, key) = self_signed(&pmm);
    let mut s = start(
        &pmm,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--header-timeout",
            "3",
        ],
    );
    assert_eq!(s.scheme, "https", "{}", s.stderr());
    // A connection that never says a word, held open: the handshake of the others goes on.
    let mut stalled = std::net::TcpStream::connect(&s.addr).unwrap();
    s.ca = Some(cert.clone());
    let t = Instant::now();
    let ok = post(&s, &[bearer(&secret)], INIT);
    assert_eq!(ok.status, 200, "{ok:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // Not trusted: curl refuses the certificate (exit 60), and does not hang.
    let untrusted = output_within(
        {
            let mut c = Command::new("curl");
            c.args(["-sS", "--max-time", "20", "-o", "/dev/null", &s.url()]);
            c
        },
        Duration::from_secs(30),
    );
    assert_eq!(untrusted.status.code(), Some(60), "{untrusted:?}");
    // Plain HTTP to the TLS port: refused at once.
    let plain = output_within(
        {
            let mut c = Command::new("curl");
            c.args(["-sS", "--max-time", "20", "-o", "/dev/null"])
                .arg(format!("http://{}/mcp", s.addr));
            c
        },
        Duration::from_secs(30),
    );
    assert!(!plain.status.success(), "{plain:?}");
    assert_ne!(
        plain.status.code(),
        Some(28),
        "plain HTTP timed out: {plain:?}"
    );
    // The stalled handshake is given up after --header-timeout.
    let (took, _) = closed_within(&mut stalled, Duration::from_secs(15))
        .expect("a stalled TLS handshake is closed");
    assert!(took < Duration::from_secs(10), "{took:?}");
    if have_python_mcp() {
        let recs = client(&s, &secret, "session", &[]);
        for r in recs.iter().filter(|r| r["step"] == "call") {
            assert_eq!(r["is_error"], false, "{r}");
        }
        let doc = curl(&[
            "--cacert",
            cert.to_str().unwrap(),
            &format!("https://{}/.well-known/oauth-protected-resource", s.addr),
        ]);
        let doc: Value = serde_json::from_str(&doc.body).unwrap();
        assert_eq!(doc["resource"], s.url());
    } else {
        python_mcp_or_skip("the pmm-mcp --http TLS test's Python half");
    }
    // SIGTERM over TLS: exit 0 as over plain HTTP.
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(s.pid(), libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{}", s.stderr());
}

/// --public-url: behind a proxy that terminates TLS, the 401 and the metadata name the URL
/// clients use, and its host is allowed without --allowed-host.
#[test]
fn mcp_http_behind_a_proxy_the_401_and_the_metadata_name_the_public_url() {
    if !curl_or_skip("the pmm-mcp --http --public-url test") {
        return;
    }
    let pmm = Pmm::new();
    new_token(&pmm, "laptop", "write");
    let s = start(&pmm, &["--public-url", "https://mind.example.org/mcp"]);
    let r = post(&s, &["Host: mind.example.org".into()], INIT);
    assert_eq!(r.status, 401, "{r:?}");
    assert!(
        r.head.contains(
            "www-authenticate: bearer resource_metadata=\"https://mind.example.org/.well-known/oauth-protected-resource/mcp\""
        ),
        "{r:?}"
    );
    let m = curl(&[
        "-H",
        "Host: mind.example.org",
        &format!("http://{}/.well-known/oauth-protected-resource/mcp", s.addr),
    ]);
    assert_eq!(m.status, 200, "{m:?}");
    let doc: Value = serde_json::from_str(&m.body).unwrap();
    assert_eq!(doc["resource"], "https://mind.example.org/mcp");
    // Another host is still refused.
    assert_eq!(post(&s, &["Host: evil.example".into()], INIT).status, 403);
    // A URL that is not one: exit 2, a line naming it.
    let r = pmm.run(
        "pmm-mcp",
        &[
            "--http",
            "127.0.0.1:0",
            "--no-auth",
            "--public-url",
            "mind.example.org/mcp",
        ],
        "",
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--public-url"), "{r:?}");
}

/// The MCP Inspector's command-line mode over HTTP (npm `@modelcontextprotocol/inspector`,
/// found through `PMM_MCP_INSPECTOR`). Its CLI (0.15) sends no custom header, so the server
/// is a loopback --no-auth one.
#[test]
fn mcp_http_the_inspector_cli_lists_calls_and_reads_over_http() {
    let Some(inspector) = std::env::var_os("PMM_MCP_INSPECTOR").filter(|p| !p.is_empty()) else {
        present_or_skip(
            false,
            "the MCP Inspector in PMM_MCP_INSPECTOR (npm install @modelcontextprotocol/inspector; .ci/run installs it)",
            "the MCP Inspector over HTTP test",
        );
        return;
    };
    let pmm = Pmm::new();
    let r = pmm.run(
        "pmm-append",
        &[
            "--kind",
            "user_message",
            "--content",
            "The blue folder holds the quarterly report.",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let s = HttpServer::start(&pmm, &["--no-auth"]);
    let run = |args: &[&str]| -> Value {
        let mut c = Command::new(&inspector);
        c.args(["--cli", &s.url(), "--transport", "http"])
            .args(args);
        let out = output_within(c, Duration::from_secs(120));
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("the inspector prints JSON")
    };
    let tools = run(&["--method", "tools/list"]);
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"recall") && names.contains(&"remember"),
        "{names:?}"
    );
    let recall = run(&[
        "--method",
        "tools/call",
        "--tool-name",
        "recall",
        "--tool-arg",
        "query=where is the quarterly report?",
    ]);
    assert_eq!(
        recall["structuredContent"]["results"][0]["id"], 1,
        "{recall}"
    );
    let wrote = run(&[
        "--method",
        "tools/call",
        "--tool-name",
        "remember",
        "--tool-arg",
        "text=Dana wants it by Friday.",
    ]);
    assert_eq!(wrote["isError"], false, "{wrote}");
    let ev = run(&["--method", "resources/read", "--uri", "pmm://event/2"]);
    let text = ev["contents"][0]["text"].as_str().unwrap();
    let e: Value = serde_json::from_str(text).unwrap();
    assert_eq!(e["content"], "Dana wants it by Friday.");
    assert_eq!(e["meta"]["source"], "mcp");
    verify_clean(&pmm);
}
