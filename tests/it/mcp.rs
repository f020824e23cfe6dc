//! pmm-mcp (issue 19): the ledger as memory for MCP clients. The session tests drive the real
//! server with the official MCP Python SDK (`tests/mcp_client.py`); the protocol-abuse tests
//! (invalid UTF-8, a closed stdin mid-request) write raw bytes to its stdin.

use crate::harness::{present_or_skip, tool_or_skip, Pmm};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

const NOW: &str = "2025-11-24T05:55:41.194157Z";

fn server_bin() -> std::path::PathBuf {
    assert_cmd::cargo::cargo_bin("pmm-mcp")
}

/// True when python3 and its `mcp` package are there (see [`present_or_skip`]; `.ci/run`
/// installs the package).
fn python_mcp_or_skip(why: &str) -> bool {
    if !tool_or_skip("python3", why) {
        return false;
    }
    let ok = Command::new("python3")
        .args(["-c", "import mcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    present_or_skip(ok, "the MCP Python SDK (python3 -m pip install mcp)", why)
}

/// The command line that runs `tests/mcp_client.py MODE ARGS -- pmm-mcp --db DB SERVER_ARGS`.
fn client_cmd(pmm: &Pmm, mode: &str, args: &[&str], server_args: &[&str]) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let mut c = Command::new("python3");
    c.current_dir(pmm.dir.path())
        .arg(script)
        .arg(mode)
        .args(args)
        .arg("--")
        .arg(server_bin())
        .arg("--db")
        .arg(&pmm.db)
        .args(["--now", NOW, "--quiet"])
        .args(server_args);
    c
}

/// Runs the client to the end; its JSON lines.
fn client(pmm: &Pmm, mode: &str, args: &[&str], server_args: &[&str]) -> Vec<Value> {
    let out = client_cmd(pmm, mode, args, server_args)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client {mode} failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn calls<'a>(records: &'a [Value], tool: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["step"] == "call" && r["tool"] == tool)
        .collect()
}

fn assert_tool_error(r: &Value, needle: &str) {
    assert_eq!(r["is_error"], true, "expected an isError result: {r}");
    let text = r["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(needle),
        "{text:?} does not mention {needle:?}"
    );
}

fn verify_clean(pmm: &Pmm) -> Value {
    let v = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(v.code, 0, "pmm-verify: {v:?}");
    v.summary()
}

fn events(pmm: &Pmm) -> Vec<Value> {
    let r = pmm.run("pmm-replay", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
}

#[test]
fn mcp_session_with_the_python_sdk_client_uses_every_tool_and_resource() {
    if !python_mcp_or_skip("the pmm-mcp session test") {
        return;
    }
    let pmm = Pmm::new();
    let recs = client(&pmm, "session", &[], &[]);

    let init = &recs[0];
    assert_eq!(init["step"], "initialize");
    assert_eq!(init["server"], "pmm-mcp");
    assert!(init["protocol_version"]
        .as_str()
        .is_some_and(|v| !v.is_empty()));

    let tools = recs.iter().find(|r| r["step"] == "list_tools").unwrap();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        // The admin tools are listed to the stdio client (the local owner's).
        [
            "recall", "remember", "commit", "close", "state", "events", "prove", "verify",
            "correct", "forget"
        ]
    );
    for t in tools["tools"].as_array().unwrap() {
        let d = t["description"].as_str().unwrap_or_default();
        assert!(
            d.len() > 40 && !d.contains('\n'),
            "one line a model can act on: {t}"
        );
        assert_eq!(t["schema"]["type"], "object", "{t}");
    }
    let res = recs.iter().find(|r| r["step"] == "list_resources").unwrap();
    assert_eq!(res["resources"], json!(["pmm://state"]));
    assert_eq!(res["templates"], json!(["pmm://event/{id}"]));

    // remember: a note, then a message; each is the appended event, meta.source "mcp".
    let rem = calls(&recs, "remember");
    let note = &rem[0]["value"]["event"];
    assert_eq!(
        (note["id"].as_i64(), note["kind"].as_str()),
        (Some(1), Some("reflection"))
    );
    assert_eq!(note["meta"], json!({"source": "mcp"}));
    assert_eq!(note["ts"], NOW);
    let msg = &rem[1]["value"]["event"];
    assert_eq!(msg["kind"], "user_message");
    assert_eq!(msg["meta"], json!({"role": "user", "source": "mcp"}));

    // recall finds the note, with via and score, as pmm-recall does.
    let recall = &calls(&recs, "recall")[0]["value"];
    let hits = recall["results"].as_array().unwrap();
    let note_hit = hits
        .iter()
        .find(|h| h["id"] == 1)
        .expect("the note is recalled");
    assert!(note_hit["via"].as_array().is_some_and(|v| !v.is_empty()));
    assert!(note_hit["score"].as_f64().is_some_and(|s| s > 0.0));
    let cli = pmm.run(
        "pmm-recall",
        &["--k", "5", "where is the quarterly report?"],
        "",
    );
    // (The ledger has grown since the call: compare over the events it had then.)
    let mut cli_ids: Vec<i64> = cli
        .records()
        .iter()
        .filter_map(|r| r["id"].as_i64())
        .collect();
    cli_ids.retain(|id| *id <= 2);
    let mut mcp_ids: Vec<i64> = hits.iter().filter_map(|r| r["id"].as_i64()).collect();
    cli_ids.sort_unstable();
    mcp_ids.sort_unstable();
    assert_eq!(mcp_ids, cli_ids, "the same events as pmm-recall");

    // commit / state / close, as the COMMIT: and CLOSE: markers write them.
    let commit = &calls(&recs, "commit")[0]["value"];
    let cid = commit["cid"].as_str().unwrap();
    assert_eq!(cid.len(), 8);
    let ev = &commit["event"];
    assert_eq!(ev["kind"], "commitment_open");
    assert_eq!(
        ev["content"],
        "Commitment opened: send the quarterly report to Dana"
    );
    assert_eq!(ev["meta"]["cid"], cid);
    assert_eq!(ev["meta"]["text"], "send the quarterly report to Dana");
    assert_eq!(ev["meta"]["source"], "mcp");
    let state = &calls(&recs, "state")[0]["value"];
    assert_eq!(state["type"], "state");
    assert_eq!(state["open_commitments"][0]["cid"], cid);
    assert!(state.get("identity").is_some() && state.get("rsm").is_some());
    assert!(state.get("thresholds").is_some());
    let closes = calls(&recs, "close");
    assert_eq!(
        closes[0]["value"]["event"]["content"],
        format!("Commitment closed: {cid}")
    );
    assert_tool_error(closes[1], "no open commitment");

    // events: paging and a kind filter.
    let ev = calls(&recs, "events");
    assert_eq!(ev[0]["value"]["count"], 3);
    assert_eq!(ev[0]["value"]["truncated"], true);
    assert_eq!(ev[0]["value"]["next_since"], 4);
    assert_eq!(ev[1]["value"]["count"], 1);
    assert_eq!(ev[1]["value"]["events"][0]["kind"], "commitment_open");

    // verify and verify --deep: clean, and the same summary as pmm-verify.
    let ver = calls(&recs, "verify");
    let summary = &ver[0]["value"]["summary"];
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(summary["events"], 4);
    assert_eq!(ver[1]["value"]["summary"]["ok"], true);
    assert_eq!(ver[1]["value"]["summary"]["deep"]["cids"], 1);
    let cli = verify_clean(&pmm);
    assert_eq!(summary["last_hash"], cli["last_hash"]);
    assert_eq!(summary["sha256_full_digest"], cli["sha256_full_digest"]);

    // prove: the inclusion proof pmm-verify --prove prints for the same tree, and it checks
    // offline against the root; an event that is not there is a tool error.
    let proofs = calls(&recs, "prove");
    let proof = &proofs[0]["value"];
    assert_eq!(proof["type"], "inclusion");
    assert_eq!(proof["id"], 2);
    let size = proof["size"].as_u64().unwrap().to_string();
    let cli = pmm.run("pmm-verify", &["--prove", "2", "--size", &size], "");
    assert_eq!(cli.code, 0, "{cli:?}");
    assert_eq!(
        &cli.records()[0],
        proof,
        "the same record as pmm-verify --prove"
    );
    let file = pmm.path("proof.json");
    std::fs::write(&file, proof.to_string()).unwrap();
    let root = proof["root"].as_str().unwrap();
    let check = pmm.run(
        "pmm-verify",
        &["--check-proof", file.to_str().unwrap(), "--root-hex", root],
        "",
    );
    assert_eq!(check.code, 0, "{check:?}");
    assert_tool_error(proofs[1], "not in the tree");

    // Resources: the state as pmm-replay --state prints it, one event, a missing one.
    let reads: Vec<&Value> = recs
        .iter()
        .filter(|r| r["step"] == "read_resource")
        .collect();
    assert_eq!(reads[0]["mime"], "application/json");
    let replay = pmm.run("pmm-replay", &["--state"], "");
    assert_eq!(
        reads[0]["value"],
        replay.records()[0],
        "pmm://state is pmm-replay --state"
    );
    assert_eq!(
        reads[1]["value"],
        events(&pmm)[0],
        "pmm://event/1 is event 1"
    );
    assert!(reads[2]["error"]
        .as_str()
        .is_some_and(|e| e.contains("no event 999999")));
}

#[test]
fn mcp_remember_500_times_while_ticks_and_a_turn_share_the_ledger() {
    if !python_mcp_or_skip("the pmm-mcp concurrency test") {
        return;
    }
    let pmm = Pmm::new();
    let mut c = client_cmd(&pmm, "remember", &["500", "mcp-note"], &[]);
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut slot, mut turned) = (1, false);
    let mut ticks = 0;
    let started = Instant::now();
    loop {
        let t = pmm.run("pmm-tick", &["--slot", &slot.to_string()], "");
        assert_eq!(t.code, 0, "pmm-tick: {t:?}");
        ticks += 1;
        slot += 1;
        if !turned && slot > 3 {
            let r = pmm.run("pmm-turn", &["--adapter", "dummy", "hello from a turn"], "");
            assert_eq!(r.code, 0, "pmm-turn: {r:?}");
            turned = true;
        }
        if started.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            panic!("the client did not finish in 10 minutes");
        }
        // Poll the client without reaping it, so the tick loop never blocks on it.
        if child_done(&child) {
            break;
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec: Value = serde_json::from_slice(out.stdout.trim_ascii()).unwrap();
    assert_eq!(rec["ok"], 500, "{rec}");
    assert!(turned && ticks >= 4, "ticks {ticks}, turned {turned}");

    let summary = verify_clean(&pmm);
    assert_eq!(summary["ok"], true);
    let all = events(&pmm);
    for i in 0..500 {
        let text = format!("mcp-note-{i}");
        let n = all.iter().filter(|e| e["content"] == text.as_str()).count();
        assert_eq!(n, 1, "{text} is there {n} times");
    }
    assert!(all.iter().any(|e| e["kind"] == "autonomy_tick"));
    assert!(all.iter().any(|e| e["kind"] == "assistant_message"));
}

/// True once the child has exited (without reaping it: `wait_with_output` does that).
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
fn mcp_bad_arguments_are_tool_errors_and_the_server_keeps_serving() {
    if !python_mcp_or_skip("the pmm-mcp bad input test") {
        return;
    }
    let pmm = Pmm::new();
    let recs = client(&pmm, "bad", &[], &[]);
    let by = |i: usize| recs.iter().filter(|r| r["step"] == "call").nth(i).unwrap();
    // An unknown tool is a protocol error (invalid params), as MCP asks.
    assert_eq!(by(0)["protocol_error"]["code"], -32602, "{}", by(0));
    assert_tool_error(by(1), "invalid type");
    assert_tool_error(by(2), "invalid type");
    assert_tool_error(by(3), "the limit is 1000");
    assert_tool_error(by(4), "the limit is 1000000");
    assert_tool_error(by(5), "not a recalled kind");
    assert_tool_error(by(6), "unknown field");
    assert_tool_error(by(7), "the limit is 1048576 bytes");
    assert_tool_error(by(8), "empty");
    assert_tool_error(by(9), "remember writes only");
    assert_tool_error(by(10), "missing field `text`");
    assert_tool_error(by(11), "the limit is 10000");
    assert_tool_error(by(12), "unknown kind");
    assert_tool_error(by(13), "not in the ledger");
    assert_tool_error(by(14), "no open commitment");
    assert_eq!(by(15)["is_error"], false, "still serving: {}", by(15));
    // Nothing of the refused calls was written: one event, the last call's.
    let all = events(&pmm);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0]["content"], "still serving after all that");
    verify_clean(&pmm);
}

#[test]
fn mcp_read_only_lists_and_refuses_no_write_tool() {
    if !python_mcp_or_skip("the pmm-mcp --read-only test") {
        return;
    }
    let pmm = Pmm::new();
    pmm.seed(4);
    let before = events(&pmm);
    let recs = client(&pmm, "readonly", &[], &["--read-only"]);
    let names: Vec<&str> = recs[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["recall", "state", "events", "prove", "verify"]);
    for tool in ["remember", "commit", "close"] {
        assert_tool_error(calls(&recs, tool)[0], "--read-only");
    }
    assert_eq!(calls(&recs, "recall")[0]["is_error"], false);
    assert_eq!(events(&pmm), before, "nothing written");
}

#[test]
fn mcp_read_only_needs_an_existing_ledger() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm-mcp", &["--read-only"], "");
    r.assert_error("pmm-mcp", &["no such ledger"]);
    assert!(!pmm.db.exists());
}

#[test]
fn mcp_a_ledger_locked_past_the_busy_timeout_is_a_tool_error_then_writes_resume() {
    if !python_mcp_or_skip("the pmm-mcp busy timeout test") {
        return;
    }
    let pmm = Pmm::new();
    pmm.seed(1);
    let db = pmm.db.to_str().unwrap().to_string();
    let recs = client(&pmm, "locked", &[&db], &["--busy-timeout", "300"]);
    let rem = calls(&recs, "remember");
    assert_tool_error(rem[0], "database is locked");
    assert_eq!(rem[1]["is_error"], false, "{}", rem[1]);
    let all = events(&pmm);
    assert_eq!(all.len(), 2);
    assert_eq!(all[1]["content"], "written after the lock");
    verify_clean(&pmm);
}

/// How long [`Raw::reply`] waits for a line.
const REPLY_WAIT: Duration = Duration::from_secs(30);

/// A pmm-mcp spoken to in raw JSON-RPC lines, for input no SDK client would send.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The server's stdout lines, read by a thread (so a reply that never comes fails the
    /// test after [`REPLY_WAIT`] instead of hanging it).
    stdout: std::sync::mpsc::Receiver<String>,
}

impl Raw {
    fn start(pmm: &Pmm) -> Raw {
        Raw::start_with(pmm, &[])
    }

    fn start_with(pmm: &Pmm, args: &[&str]) -> Raw {
        let mut child = cmd_std(pmm, "pmm-mcp")
            .args(["--quiet"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (tx, stdout) = std::sync::mpsc::channel();
        std::thread::spawn(move || loop {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap_or(0) == 0 || tx.send(line).is_err() {
                return;
            }
        });
        let mut raw = Raw {
            child,
            stdin,
            stdout,
        };
        raw.send(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
        let init = raw.reply();
        assert_eq!(init["id"], 0, "{init}");
        assert!(init["result"]["serverInfo"]["name"] == "pmm-mcp", "{init}");
        raw.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        raw
    }

    fn send(&mut self, line: &[u8]) {
        let w = self.stdin.as_mut().unwrap();
        w.write_all(line).unwrap();
        w.write_all(b"\n").unwrap();
        w.flush().unwrap();
    }

    fn reply(&mut self) -> Value {
        let line = self
            .stdout
            .recv_timeout(REPLY_WAIT)
            .expect("pmm-mcp did not answer within 30 s");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    }

    fn remember(&mut self, id: u64, text: &str) -> Value {
        let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": "remember", "arguments": {"text": text}}});
        self.send(req.to_string().as_bytes());
        self.reply()
    }

    /// Calls tool `name` with `args` as request `id`; the reply.
    fn call(&mut self, id: u64, name: &str, args: Value) -> Value {
        let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": name, "arguments": args}});
        self.send(req.to_string().as_bytes());
        self.reply()
    }

    /// Reads resource `uri` as request `id`; the reply.
    fn read(&mut self, id: u64, uri: &str) -> Value {
        let req = json!({"jsonrpc": "2.0", "id": id, "method": "resources/read",
                         "params": {"uri": uri}});
        self.send(req.to_string().as_bytes());
        self.reply()
    }

    /// Closes stdin and waits (at most 10 s) for the exit status.
    fn close(mut self) -> (i32, String) {
        drop(self.stdin.take());
        let started = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                self.child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                return (s.code().unwrap_or(-1), err);
            }
            if started.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
                panic!("pmm-mcp did not exit within 10 s of its stdin closing");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A std Command for program `name` on `pmm`'s ledger (for a child whose pipes the test drives).
fn cmd_std(pmm: &Pmm, name: &str) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin(name));
    c.current_dir(pmm.dir.path())
        .env_remove("RUST_BACKTRACE")
        .env("PMM_DB", &pmm.db)
        .env("PMM_NOW", NOW);
    c
}

#[test]
fn mcp_invalid_utf8_and_garbage_lines_do_not_stop_the_server() {
    let pmm = Pmm::new();
    let mut raw = Raw::start(&pmm);
    // Invalid UTF-8 inside a request's string, a bare invalid byte line, and not JSON at all:
    // each is answered with a parse error, carrying the request's id when it can be read
    // (issue 34: a client waiting on that id would otherwise hang), else null ...
    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"remember\",\"arguments\":{\"text\":\"bad \xff\xfe bytes\"}}}");
    raw.send(b"\xc3\x28\xa0\xa1");
    raw.send(b"this is not json");
    for id in [json!(7), Value::Null, Value::Null] {
        let err = raw.reply();
        assert_eq!(err["error"]["code"], -32700, "{err}");
        assert_eq!(err.get("id"), Some(&id), "{err}");
    }
    // ... JSON that is not a request is answered with an error ...
    raw.send(br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":"nope"}"#);
    let err = raw.reply();
    assert!(err.get("error").is_some(), "{err}");
    assert_eq!(err["id"], 8, "{err}");
    // ... and the server goes on serving.
    let ok = raw.remember(9, "after the garbage");
    assert_eq!(ok["id"], 9, "{ok}");
    assert_eq!(ok["result"]["isError"], false, "{ok}");
    let (code, stderr) = raw.close();
    assert_eq!(code, 0, "{stderr}");
    let all = events(&pmm);
    assert_eq!(all.len(), 1, "only the good request wrote: {all:?}");
    assert_eq!(all[0]["content"], "after the garbage");
    verify_clean(&pmm);
}

/// Issue 34: a request holding a lone surrogate escape (what a JavaScript client sends for a
/// text cut in the middle of an emoji) got no response at all, so the client hung; it is read
/// with U+FFFD in the surrogate's place (as JavaScript's TextEncoder writes it).
#[test]
fn mcp_a_lone_surrogate_in_a_request_is_read_as_a_replacement_character() {
    let pmm = Pmm::new();
    let mut raw = Raw::start(&pmm);
    raw.send(br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"remember","arguments":{"text":"cut \ud83d"}}}"#);
    let ok = raw.reply();
    assert_eq!(ok["id"], 5, "{ok}");
    assert_eq!(ok["result"]["isError"], false, "{ok}");
    // A pair is one character, as ever; a lone low surrogate is replaced too.
    raw.send(br#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"remember","arguments":{"text":"\ud83d\ude00 and \ude00"}}}"#);
    let ok = raw.reply();
    assert_eq!(ok["id"], 6, "{ok}");
    let (code, stderr) = raw.close();
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("U+FFFD"), "{stderr}");
    let all = events(&pmm);
    let texts: Vec<&str> = all.iter().map(|e| e["content"].as_str().unwrap()).collect();
    assert_eq!(texts, ["cut \u{fffd}", "\u{1f600} and \u{fffd}"]);
    verify_clean(&pmm);
}

/// Issue 34: an error response to a request the server could not read carried no `id`;
/// JSON-RPC 2.0 asks for the request's id, or null when it cannot be read. A line over
/// --max-line is answered too, with the id from its first bytes.
#[test]
fn mcp_error_responses_to_unreadable_requests_carry_the_id_or_null() {
    let pmm = Pmm::new();
    let mut raw = Raw::start_with(&pmm, &["--max-line", "2K"]);
    raw.send(br#"{"jsonrpc":"2.0","id":"req-1","method":"tools/call","params":{"name":"rem"#);
    let err = raw.reply();
    assert_eq!(err["id"], "req-1", "{err}");
    assert_eq!(err["error"]["code"], -32700, "{err}");
    raw.send(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
    let err = raw.reply();
    assert!(err.get("id").is_some_and(Value::is_null), "{err}");
    assert_eq!(err["error"]["code"], -32600, "{err}");
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{{"name":"remember","arguments":{{"text":"{}"}}}}}}"#,
        "x".repeat(4000)
    );
    raw.send(long.as_bytes());
    let err = raw.reply();
    assert_eq!(err["id"], 31, "{err}");
    assert_eq!(err["error"]["code"], -32600, "{err}");
    let message = err["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--max-line"), "{err}");
    let ok = raw.remember(32, "still serving");
    assert_eq!(ok["id"], 32, "{ok}");
    let (code, stderr) = raw.close();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(events(&pmm).len(), 1);
}

/// Issue 34: a running server did not notice that `pmm-append --erase` blanked a commitment
/// it had projected, and kept serving the erased text from the projections it keeps between
/// calls until it restarted.
#[test]
fn mcp_a_running_server_never_serves_text_erased_since_its_last_call() {
    let pmm = Pmm::new();
    let mut raw = Raw::start(&pmm);
    let card = "4111-1111-1111-1111";
    let c = raw.call(
        1,
        "commit",
        json!({"text": format!("pay rent with card {card}")}),
    );
    assert_eq!(c["result"]["isError"], false, "{c}");
    let s = raw.call(2, "state", json!({}));
    assert!(
        s.to_string().contains(card),
        "the state shows it first: {s}"
    );
    let r = raw.read(3, "pmm://state");
    assert!(r.to_string().contains(card), "{r}");
    let id = events(&pmm)
        .iter()
        .find(|e| e["kind"] == "commitment_open")
        .and_then(|e| e["id"].as_i64())
        .expect("the commitment_open event");
    let e = pmm.run(
        "pmm-append",
        &[
            "--erase",
            &id.to_string(),
            "--source",
            "owner",
            "--reason",
            "a card number",
        ],
        "",
    );
    assert_eq!(e.code, 0, "{e:?}");
    for (n, text) in ["groceries on friday", "call the bank", "water the plants"]
        .iter()
        .enumerate()
    {
        let ok = raw.remember(10 + n as u64, text);
        assert_eq!(ok["result"]["isError"], false, "{ok}");
    }
    let t = pmm.run("pmm-tick", &["--quiet"], "");
    assert_eq!(t.code, 0, "{t:?}");
    let s = raw.call(20, "state", json!({}));
    assert_eq!(s["result"]["isError"], false, "{s}");
    assert!(
        !s.to_string().contains(card),
        "state serves the erased text: {s}"
    );
    let r = raw.read(21, "pmm://state");
    assert!(r["result"].is_object(), "{r}");
    assert!(!r.to_string().contains(card), "pmm://state serves it: {r}");
    let found = raw.call(22, "recall", json!({"query": "pay rent with card 4111"}));
    assert!(
        !found.to_string().contains(card),
        "recall finds it: {found}"
    );
    let (code, stderr) = raw.close();
    assert_eq!(code, 0, "{stderr}");
    // The chain and every derived event, the tick's stability_metrics after the erasure
    // included (issue 34 item 4).
    verify_clean(&pmm);
}

#[test]
fn mcp_closed_stdin_mid_request_exits_cleanly_and_writes_nothing_half() {
    let pmm = Pmm::new();
    let mut raw = Raw::start(&pmm);
    let ok = raw.remember(1, "before the cut");
    assert_eq!(ok["result"]["isError"], false, "{ok}");
    // Half a request, then the pipe closes.
    let w = raw.stdin.as_mut().unwrap();
    w.write_all(
        br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"remember","argu"#,
    )
    .unwrap();
    w.flush().unwrap();
    let (code, stderr) = raw.close();
    assert_eq!(
        code, 0,
        "a closed stdin is the end of the session: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let all = events(&pmm);
    assert_eq!(all.len(), 1, "{all:?}");
    verify_clean(&pmm);
}

#[test]
fn mcp_a_10_mb_request_is_a_tool_error_not_a_crash() {
    let pmm = Pmm::new();
    let mut raw = Raw::start(&pmm);
    let big = "é".repeat(5 * 1024 * 1024);
    let r = raw.remember(3, &big);
    assert_eq!(
        r["result"]["isError"],
        true,
        "{}",
        &r.to_string()[..200.min(r.to_string().len())]
    );
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("the limit is 1048576 bytes"), "{text}");
    let ok = raw.remember(4, "small");
    assert_eq!(ok["result"]["isError"], false, "{ok}");
    let (code, _) = raw.close();
    assert_eq!(code, 0);
    assert_eq!(events(&pmm).len(), 1);
}

/// The MCP Inspector's command-line mode (npm `@modelcontextprotocol/inspector`, found through
/// `PMM_MCP_INSPECTOR`, as `.ci/run` installs it) drives pmm-mcp too: list the tools, call
/// recall and remember, read a resource.
#[test]
fn mcp_the_inspector_cli_lists_calls_and_reads() {
    let Some(inspector) = std::env::var_os("PMM_MCP_INSPECTOR").filter(|p| !p.is_empty()) else {
        present_or_skip(
            false,
            "the MCP Inspector in PMM_MCP_INSPECTOR (npm install @modelcontextprotocol/inspector; .ci/run installs it)",
            "the MCP Inspector test",
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
    let server = assert_cmd::cargo::cargo_bin("pmm-mcp");
    let run = |args: &[&str]| -> Value {
        let out = std::process::Command::new(&inspector)
            .arg("--cli")
            .arg(&server)
            .args(["--db", pmm.db.to_str().unwrap()])
            .args(args)
            .current_dir(pmm.dir.path())
            .output()
            .expect("the inspector runs");
        assert!(
            out.status.success(),
            "{args:?}: {}",
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
        names.contains(&"recall") && names.contains(&"prove"),
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
    assert_eq!(recall["isError"], false, "{recall}");
    assert_eq!(
        recall["structuredContent"]["results"][0]["id"], 1,
        "{recall}"
    );
    let remember = run(&[
        "--method",
        "tools/call",
        "--tool-name",
        "remember",
        "--tool-arg",
        "text=Dana wants it by Friday.",
    ]);
    assert_eq!(
        remember["structuredContent"]["event"]["id"], 2,
        "{remember}"
    );
    let ev = run(&["--method", "resources/read", "--uri", "pmm://event/2"]);
    let text = ev["contents"][0]["text"].as_str().unwrap();
    assert!(text.contains("Dana wants it by Friday."), "{text}");
    assert_eq!(pmm.run("pmm-verify", &["--quiet"], "").code, 0);
}
