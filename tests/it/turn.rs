//! pmm-turn end to end: stub model servers on 127.0.0.1, scripted replies, markers, claims,
//! failures, and the bound on what a turn reads.

use crate::harness::Pmm;
use crate::stub::{Stub, StubResponse};
use serde_json::{json, Value};

const KEY: &str = "sk-test-0123456789-secret";

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.get("kind").is_some())
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

fn turn_record(records: &[Value]) -> Value {
    records
        .iter()
        .find(|r| r["type"] == "turn")
        .cloned()
        .expect("turn record")
}

fn of_kind<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

fn script(pmm: &Pmm, replies: &[&str]) -> String {
    let path = pmm.path("replies.jsonl");
    let text: String = replies
        .iter()
        .map(|r| format!("{}\n", Value::String(r.to_string())))
        .collect();
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn verify_clean(pmm: &Pmm) {
    let v = pmm.run("pmm-verify", &["--quiet"], "");
    assert_eq!(v.code, 0, "ledger must verify: {v:?}");
}

#[test]
fn first_turn_writes_configs_then_the_turn_in_order() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm-turn", &["--adapter", "dummy", "hello there"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let recs = r.records();
    assert_eq!(
        kinds(&recs),
        [
            "config",
            "config",
            "user_message",
            "embedding_add",
            "assistant_message",
            "embedding_add",
            "commitment_open",
            "retrieval_selection",
            "metrics_turn",
            "reflection",
            "meta_summary",
            "reflection",
            // More than ten events and no summary yet: the reference's gate lets one through.
            "summary_update",
        ]
    );
    let t = turn_record(&recs);
    assert_eq!(t["reply"], "Echo: hello there\nCOMMIT: note this item");
    assert_eq!(t["opened"], json!(["e2eb5791"]));
    let a = of_kind(&recs, "assistant_message")[0];
    assert_eq!(a["meta"]["provider"], "dummy");
    assert_eq!(a["meta"]["temperature"], 0.0);
    assert_eq!(a["meta"]["top_p"], 1.0);
    assert_eq!(a["meta"]["prompt_sha256"].as_str().unwrap().len(), 64);
    let m = of_kind(&recs, "metrics_turn")[0];
    assert!(m["content"]
        .as_str()
        .unwrap()
        .starts_with("provider:dummy,model:,in_tokens:"));
    let delta = of_kind(&recs, "reflection")[1];
    assert_eq!(delta["content"], "Opened commitments: e2eb5791.");
    // The second turn writes no configs again, and --deep finds nothing to object to.
    let r2 = pmm.run("pmm-turn", &["--adapter", "dummy", "--text", "again"], "");
    assert_eq!(r2.code, 0, "{r2:?}");
    assert_eq!(r2.stdout, "Echo: again\nCOMMIT: note this item\n");
    let v = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(v.code, 0, "{v:?}");
    assert_eq!(v.summary()["derived_mismatches"], 0);
}

#[test]
fn identity_survives_a_swap_of_provider_and_model() {
    let pmm = Pmm::new();
    let openai = Stub::start(vec![StubResponse::OpenAi(
        "Happy to be called Echo.\nCLAIM:name_change={\"new_name\":\"Echo\"}".into(),
    )]);
    let out = pmm
        .cmd("pmm-turn")
        .env("OPENAI_BASE_URL", format!("{}/v1", openai.url()))
        .env("OPENAI_API_KEY", KEY)
        .args([
            "--adapter",
            "openai",
            "--model",
            "gpt-test",
            "--seed",
            "7",
            "Your name is Echo.",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(!stdout.contains(KEY) && !String::from_utf8_lossy(&out.stderr).contains(KEY));
    let reqs = openai.requests();
    assert_eq!(reqs.len(), 1);
    let req = &reqs[0];
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(req.body["model"], "gpt-test");
    assert_eq!(req.body["temperature"], 0.0);
    assert_eq!(req.body["seed"], 7);
    assert_eq!(req.body["messages"][0]["role"], "system");
    assert_eq!(
        req.body["messages"][1],
        json!({"role": "user", "content": "Your name is Echo."})
    );
    let recs: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let claim = of_kind(&recs, "claim");
    assert_eq!(claim.len(), 1);
    assert_eq!(
        claim[0]["content"],
        r#"CLAIM:name_change={"new_name":"Echo"}"#
    );
    let a = of_kind(&recs, "assistant_message")[0];
    assert_eq!(a["meta"]["provider"], "openai");
    assert_eq!(a["meta"]["seed"], 7);
    let m = of_kind(&recs, "metrics_turn")[0];
    assert!(
        m["content"]
            .as_str()
            .unwrap()
            .contains("in_tokens:13,out_tokens:5"),
        "{m}"
    );

    let ollama = Stub::start(vec![StubResponse::Ollama("I am Echo.".into())]);
    let out = pmm
        .cmd("pmm-turn")
        .env("OLLAMA_HOST", ollama.url())
        .args([
            "--adapter",
            "ollama",
            "--model",
            "other-model",
            "Who are you?",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let reqs = ollama.requests();
    assert_eq!(reqs[0].path, "/api/chat");
    assert_eq!(reqs[0].body["model"], "other-model");
    assert_eq!(reqs[0].body["stream"], false);
    let system = reqs[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("Identity: name: Echo"), "{system}");
    let state = pmm.run("pmm-replay", &["--state"], "");
    assert_eq!(state.records()[0]["identity"]["name"], "Echo");
    // The key is nowhere in the ledger.
    let export = pmm.run("pmm-export", &["--format", "jsonl"], "");
    assert!(!export.stdout.contains(KEY));
    verify_clean(&pmm);
}

#[test]
fn markers_and_claims_each_stand_alone() {
    let pmm = Pmm::new();
    // An existing ledger to reference, and its bytes before.
    let other = Pmm::new();
    other.seed(3);
    let other_db = other.db.to_string_lossy().into_owned();
    let before = std::fs::read(&other.db).unwrap();
    let missing = pmm.path("nope/missing.db").to_string_lossy().into_owned();
    let first = "Opening two.\nCOMMIT: write the report\nCOMMIT: call home\n";
    let second = format!(
        "Closing.\r\nCLOSE: {open}\r\nCLOSE: deadbeef\r\n  CLOSE: {open}\r\n\
         CLAIM:event_existence={{\"id\":1}}\n\
         CLAIM:event_existence={{\"id\":\"abc\"}}\n\
         CLAIM:event_existence={{\"id\":99999}}\n\
         CLAIM: no equals sign\n\
         CLAIM:reference={{bad json\n\
         CLAIM:favourite_colour={{\"c\":\"blue\"}}\n\
         \tCLAIM:commitment_status={{\"cid\":\"{open2}\",\"open\":true}}\n\
         REFLECT:{{\"observations\":[\"o1\"],\"next\":\"n1\"}}\n\
         REF: {other_db}#2\nREF: {missing}#1\n",
        open = pmm_cid("write the report"),
        open2 = pmm_cid("call home"),
    );
    let s = script(&pmm, &[first, &second, "nothing to add"]);
    let r1 = pmm.run(
        "pmm-turn",
        &["--adapter", "scripted", "--script", &s, "plan"],
        "",
    );
    assert_eq!(r1.code, 0, "{r1:?}");
    assert_eq!(
        turn_record(&r1.records())["opened"],
        json!([pmm_cid("write the report"), pmm_cid("call home")])
    );

    // Marker lines in the user's message are not markers.
    let r2 = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "scripted",
            "--script",
            &s,
            "COMMIT: not mine\nCLOSE: whatever",
        ],
        "",
    );
    assert_eq!(r2.code, 0, "{r2:?}");
    let recs = r2.records();
    let t = turn_record(&recs);
    assert_eq!(t["opened"], json!([]));
    assert_eq!(
        t["closed"],
        json!([pmm_cid("write the report")]),
        "one close for the open cid only"
    );
    let valid: Vec<&str> = t["claims"]["valid"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(valid, ["event_existence", "commitment_status"]);
    let failed = t["claims"]["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 5, "{failed:?}");
    let reasons: Vec<String> = failed
        .iter()
        .map(|f| f["raw"].as_str().unwrap().to_string())
        .collect();
    assert!(reasons.iter().any(|r| r.contains("\"abc\"")));
    assert!(reasons.iter().any(|r| r.contains("99999")));
    assert!(reasons.iter().any(|r| r.contains("no equals sign")));
    assert!(reasons.iter().any(|r| r.contains("bad json")));
    assert!(reasons.iter().any(|r| r.contains("favourite_colour")));
    assert_eq!(of_kind(&recs, "claim").len(), 2);
    assert_eq!(of_kind(&recs, "commitment_close").len(), 1);
    // The correction reflection lists every failed claim, then the REFLECT block.
    let delta = of_kind(&recs, "reflection")
        .into_iter()
        .find(|e| e["meta"]["about_event"].is_number())
        .expect("delta reflection");
    let text = delta["content"].as_str().unwrap();
    assert!(
        text.starts_with("Corrections: invalid claims detected"),
        "{text}"
    );
    for needle in [
        "abc",
        "99999",
        "no equals sign",
        "bad json",
        "favourite_colour",
        "Observations: o1.",
        "Next: n1.",
    ] {
        assert!(text.contains(needle), "{needle} missing from {text}");
    }
    // REF: the existing ledger is verified and untouched; the missing one is not created.
    let refs = of_kind(&recs, "inter_ledger_ref");
    assert_eq!(refs.len(), 2);
    assert_eq!(refs[0]["meta"]["verified"], true);
    assert_eq!(
        refs[0]["meta"]["target_hash"],
        other
            .run("pmm-replay", &["--since", "2", "--until", "2"], "")
            .records()[0]["hash"]
    );
    assert_eq!(refs[1]["meta"]["verified"], false);
    assert!(!std::path::Path::new(&missing).exists());
    assert!(!pmm.path("nope").exists());
    assert_eq!(std::fs::read(&other.db).unwrap(), before);
    // The user message kept its marker text verbatim.
    assert_eq!(
        of_kind(&recs, "user_message")[0]["content"],
        "COMMIT: not mine\nCLOSE: whatever"
    );
    verify_clean(&pmm);
}

fn pmm_cid(text: &str) -> String {
    use sha1::{Digest, Sha1};
    Sha1::digest(text.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn a_500_then_a_200_gives_one_reply() {
    let pmm = Pmm::new();
    let stub = Stub::start(vec![
        StubResponse::Status(500, "{\"error\":\"busy\"}".into()),
        StubResponse::Ollama("fine".into()),
    ]);
    let r = pmm
        .cmd("pmm-turn")
        .env("OLLAMA_HOST", stub.url())
        .args(["--adapter", "ollama", "hi"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0), "{r:?}");
    assert_eq!(stub.requests().len(), 2);
    let recs: Vec<Value> = String::from_utf8(r.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(of_kind(&recs, "assistant_message").len(), 1);
    verify_clean(&pmm);
}

#[test]
fn max_tokens_is_sent_and_recorded_and_zero_is_refused() {
    let pmm = Pmm::new();
    let stub = Stub::start(vec![StubResponse::OpenAi("short".into())]);
    let turn = |args: &[&str]| {
        pmm.cmd("pmm-turn")
            .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
            .args(["--adapter", "openai"])
            .args(args)
            .output()
            .unwrap()
    };
    let r = turn(&["--max-tokens", "32", "hi"]);
    assert_eq!(r.status.code(), Some(0), "{r:?}");
    assert_eq!(stub.requests()[0].body["max_tokens"].as_u64(), Some(32));
    let recs: Vec<Value> = String::from_utf8(r.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        of_kind(&recs, "assistant_message")[0]["meta"]["max_tokens"],
        32
    );

    // Without the flag nothing is sent and nothing recorded (the reference's meta keys).
    let r = turn(&["again"]);
    assert_eq!(r.status.code(), Some(0), "{r:?}");
    assert!(stub.requests()[1].body.get("max_tokens").is_none());
    let out = String::from_utf8(r.stdout).unwrap();
    assert!(!out.contains("max_tokens"), "{out}");

    let before = pmm.count();
    for bad in ["0", "-1", "many", "4294967296"] {
        let r = turn(&[&format!("--max-tokens={bad}"), "hi"]);
        assert_eq!(r.status.code(), Some(2), "--max-tokens {bad}: {r:?}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains("--max-tokens"), "{err}");
    }
    assert_eq!(pmm.count(), before, "a refused flag writes nothing");
    assert_eq!(stub.requests().len(), 2);
    verify_clean(&pmm);
}

fn assert_recorded_failure(pmm: &Pmm, out: std::process::Output, needle: &str) {
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("pmm-turn: error: "), "{stderr}");
    assert!(stderr.contains(needle), "{stderr}");
    let events = pmm.run("pmm-replay", &[], "").records();
    let k = kinds(&events);
    assert_eq!(
        k.last().map(String::as_str),
        Some("generation_failure"),
        "{k:?}"
    );
    assert!(k.contains(&"user_message".to_string()));
    assert!(!k.contains(&"assistant_message".to_string()));
    verify_clean(pmm);
}

/// A server that is down is known before anything is appended (issue 15 item 4): exit 3,
/// with the hint, and the ledger is not even created. (Failures after the request was
/// accepted are still recorded: see the timeout test below.)
#[test]
fn a_server_that_is_down_is_found_before_the_turn_and_exits_3() {
    let pmm = Pmm::new();
    let out = pmm
        .cmd("pmm-turn")
        .env("OLLAMA_HOST", Stub::down_url())
        .args(["--adapter", "ollama", "are you there?"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("pmm-turn: error: "), "{stderr}");
    assert!(
        stderr.contains("ollama") && stderr.contains("connection refused"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was written"), "{stderr}");
    assert!(!pmm.db.exists(), "nothing may be written");
}

#[test]
fn a_server_that_never_answers_times_out_and_exits_3() {
    let pmm = Pmm::new();
    let stub = Stub::start(vec![StubResponse::Hang]);
    let out = pmm
        .cmd("pmm-turn")
        .env("OPENAI_BASE_URL", stub.url())
        .args([
            "--adapter",
            "openai",
            "--timeout",
            "1",
            "--retries",
            "0",
            "hello?",
        ])
        .output()
        .unwrap();
    assert_recorded_failure(&pmm, out, "no answer within 1 s");
}

#[test]
fn stdin_lines_are_turns_and_a_bad_line_stops_with_its_number() {
    let pmm = Pmm::new();
    let r = pmm.run(
        "pmm-turn",
        &["--adapter", "dummy", "--text"],
        "{\"content\":\"one\"}\n\n{\"content\":\"two\"}\nnot json\n{\"content\":\"never\"}\n",
    );
    r.assert_error("pmm-turn", &["<stdin>:4", "--plain"]);
    assert_eq!(
        r.stdout,
        "Echo: one\nCOMMIT: note this item\nEcho: two\nCOMMIT: note this item\n"
    );
    let plain = pmm.run(
        "pmm-turn",
        &["--adapter", "dummy", "--text", "--plain"],
        "just text\n",
    );
    assert_eq!(plain.code, 0, "{plain:?}");
    assert_eq!(plain.stdout, "Echo: just text\nCOMMIT: note this item\n");
}

#[test]
fn bad_adapter_setup_writes_nothing() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm-turn", &["--adapter", "scripted", "hi"], "");
    r.assert_error("pmm-turn", &["--script"]);
    assert!(!pmm.db.exists());
    let r = pmm.run("pmm-turn", &["--adapter", "nonsense", "hi"], "");
    r.assert_error("pmm-turn", &["nonsense"]);
}

/// A turn reads a bounded number of events: the same on a ledger ten times larger.
#[test]
fn a_turn_reads_a_bounded_number_of_events() {
    let mut rows = Vec::new();
    for n in [1_000usize, 10_000] {
        let pmm = Pmm::new();
        let mut lines = String::with_capacity(n * 80);
        for i in 0..n {
            let kind = [
                "user_message",
                "assistant_message",
                "reflection",
                "metrics_turn",
            ][i % 4];
            lines.push_str(&format!(
                "{{\"kind\":\"{kind}\",\"content\":\"event {i}\"}}\n"
            ));
        }
        let r = pmm.run("pmm-append", &["--batch"], &lines);
        assert_eq!(r.code, 0);
        // The first turn folds the ledger once and saves a checkpoint; later turns start there.
        let first = pmm.run("pmm-turn", &["--adapter", "dummy", "warm up"], "");
        assert_eq!(first.code, 0, "{first:?}");
        let r = pmm.run(
            "pmm-turn",
            &["--adapter", "dummy", "how many events do you read?"],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
        rows.push(turn_record(&r.records())["rows_read"].as_u64().unwrap());
    }
    // The reference's window (1,200 rows) plus whole-ledger recall's own bound: its full-text
    // candidates and each best hit's four neighbours, whatever the ledger's size.
    let recall_rows = pmm::recall::text::CANDIDATES + 4 * pmm::recall::text::NEIGHBOUR_HITS;
    assert!(
        rows[1] <= (1_200 + recall_rows) as u64,
        "a turn read {} events of 10^4",
        rows[1]
    );
    assert!(
        rows[1] <= rows[0] + 100,
        "reads grew with the ledger: {rows:?}"
    );
}

#[test]
fn a_turn_the_policy_forbids_is_a_violation_and_exit_1() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm-turn", &["--adapter", "dummy", "hello"], "");
    assert_eq!(r.code, 0, "{r:?}");
    // Forbid the writer without a source (actor `unknown`) the retrieval record.
    let policy = r#"{"kind":"config","content":"{\"forbid_sources\":{\"unknown\":[\"retrieval_selection\"]},\"type\":\"policy\"}","meta":{"source":"operator"}}"#;
    assert_eq!(pmm.run("pmm-append", &[], &format!("{policy}\n")).code, 0);
    let r = pmm.run("pmm-turn", &["--adapter", "dummy", "again"], "");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains(
            "policy forbids actor 'unknown' writing 'retrieval_selection'; violation recorded"
        ),
        "{}",
        r.stderr
    );
    let kinds: Vec<String> = pmm
        .run("pmm-replay", &["--tail", "3"], "")
        .records()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    // The user's message (committed before the model was called) and its embedding, then
    // the violation: nothing of the reply's transaction.
    assert_eq!(kinds, ["user_message", "embedding_add", "violation"]);
    verify_clean(&pmm);
}

/// Issue 34: turns read from stdin are one long-lived process; an erasure made between two
/// of them (from another shell) must not reach the next turn's prompt. Each turn catches its
/// projections up from a checkpoint the erasure left valid (`projection::checkpoint::catch_up`), so the open
/// commitment's text is gone from the second prompt.
#[test]
fn turns_read_from_stdin_never_prompt_with_text_erased_between_them() {
    use std::io::{BufRead, BufReader, Write};
    let pmm = Pmm::new();
    let card = "4111-1111-1111-1111";
    let line = json!({"kind": "commitment_open", "content": format!("Commitment opened: pay rent with card {card}"),
                      "meta": {"cid": "0a2c8f1b", "text": format!("pay rent with card {card}"), "source": "mcp"}});
    let r = pmm.run("pmm-append", &[], &format!("{line}\n"));
    assert_eq!(r.code, 0, "{r:?}");
    let prompt = pmm.path("prompt.json");
    let command = format!("cat > '{}'; echo ok", prompt.display());
    let mut child = pmm
        .std_cmd("pmm-turn")
        .args([
            "--adapter",
            "cmd",
            "--command",
            &command,
            "--quiet",
            "--plain",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut turn = |msg: &str| {
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
        loop {
            let mut l = String::new();
            assert!(out.read_line(&mut l).unwrap() > 0, "pmm-turn ended early");
            if l.contains("\"type\":\"turn\"") {
                return std::fs::read_to_string(&prompt).unwrap();
            }
        }
    };
    assert!(
        turn("what do I owe?").contains(card),
        "the first prompt shows it"
    );
    let e = pmm.run(
        "pmm-append",
        &[
            "--erase",
            "1",
            "--source",
            "owner",
            "--reason",
            "a card number",
        ],
        "",
    );
    assert_eq!(e.code, 0, "{e:?}");
    let second = turn("and now?");
    assert!(
        !second.contains(card),
        "the erased text reached the prompt: {second}"
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
