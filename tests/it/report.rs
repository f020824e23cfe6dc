//! The self-verifying HTML report (`pmm-export --format html`, issue 45, docs/report.md) in a
//! real headless Chromium (Debian's `chromium`, installed by `.ci/run`; `PMM_CHROMIUM` names
//! another binary). Without Chromium the tests skip with a message, or fail under
//! `PMM_REQUIRE_TOOLS=1` as CI sets it. Chromium runs with virtual time: timers fire at once,
//! so the DOM it dumps is the page after its verdict, whatever the machine's load.

use crate::harness::{self, Pmm, Run};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The Chromium binary, if present (else skipped or failed, as [`harness::present_or_skip`]).
pub fn chromium(why: &str) -> Option<String> {
    let name = std::env::var("PMM_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    harness::tool_or_skip(&name, why).then_some(name)
}

/// Opens `file` (plus a `#fragment`) headless and returns the DOM once its scripts have run;
/// `extra` are more Chromium flags.
pub fn dump_dom(chrome: &str, file: &Path, fragment: &str, extra: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}{fragment}", file.display());
    let out = std::process::Command::new(chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=30000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed on {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The attributes of the one element that opens with `tag` (e.g. `<output id="pmm-verdict"`):
/// markup made from text would be escaped (`&lt;output`), so only the page's own element
/// matches.
pub fn attributes(dom: &str, tag: &str) -> BTreeMap<String, String> {
    assert_eq!(dom.matches(tag).count(), 1, "one {tag} in the page");
    let start = dom.find(tag).unwrap() + tag.len();
    let end = start + dom[start..].find('>').unwrap();
    let mut attrs = BTreeMap::new();
    let mut rest = &dom[start..end];
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].trim().to_string();
        let after = &rest[eq + 2..];
        let close = after.find('"').unwrap();
        attrs.insert(
            name,
            after[..close].replace("&quot;", "\"").replace("&amp;", "&"),
        );
        rest = &after[close + 1..];
    }
    attrs
}

/// The page's verdict.
pub fn verdict(dom: &str) -> BTreeMap<String, String> {
    attributes(dom, "<output id=\"pmm-verdict\"")
}

fn ok(r: &Run) {
    assert_eq!(r.code, 0, "{r:?}");
}

/// A scripted conversation with plain and thinking ticks, MCP writes, an erasure (with the
/// events that quote it) and a signed checkpoint: returns the verifier key and the checkpoint.
fn conversation(pmm: &Pmm) -> (String, PathBuf) {
    let script = pmm.path("replies.jsonl");
    std::fs::write(
        &script,
        [
            "Hello Scott. I will start by learning the test plan.\nCOMMIT: learn the test plan",
            "Then that is done.\nCLOSE: cc9d9a3f\nREFLECT:{\"observations\":[\"the plan is learned\"],\"next\":\"run the tests\"}",
            "Echo it is.\nCLAIM:name_change={\"new_name\":\"Echo\"}",
            "I thought about the plan.\nCOMMIT: review the flaky tests",
        ]
        .iter()
        .map(|r| format!("{}\n", Value::String(r.to_string())))
        .collect::<String>(),
    )
    .unwrap();
    let script = script.to_string_lossy().into_owned();
    let turn = ["--adapter", "scripted", "--script", &script];
    for msg in [
        "Hello, I am Scott. Please learn the test plan.",
        "The plan is in the repository; you have read it.",
        "From now on your name is Echo. My secret is hunter2.",
    ] {
        ok(&pmm.run("pmm-turn", &[&turn[..], &[msg]].concat(), ""));
    }
    // A thinking tick (the decision reflects, so the model is asked), then a plain one.
    let think = pmm.run("pmm-tick", &[&["--slot", "1"], &turn[..]].concat(), "");
    ok(&think);
    assert!(think.stdout.contains("\"asked\":true"), "{think:?}");
    ok(&pmm.run("pmm-tick", &["--slot", "2"], ""));
    let mcp = [
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"remember","arguments":{"text":"Scott prefers short answers"}}}),
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"commit","arguments":{"text":"send the weekly report"}}}),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect::<String>();
    ok(&pmm.run("pmm-mcp", &[], &mcp));
    let erase = pmm.run(
        "pmm-append",
        &[
            "--erase",
            "24",
            "--reason",
            "the user asked to forget a secret",
            "--source",
            "user",
            "--with-quotes",
        ],
        "",
    );
    ok(&erase);
    let key = pmm.path("log.key");
    let keygen = pmm.run(
        "pmm-export",
        &[
            "--keygen",
            "test.example/agent",
            "--key",
            key.to_str().unwrap(),
        ],
        "",
    );
    ok(&keygen);
    let cp = pmm.run(
        "pmm-export",
        &["--checkpoint", "--key", key.to_str().unwrap()],
        "",
    );
    ok(&cp);
    let cp_path = pmm.path("cp.txt");
    std::fs::write(&cp_path, &cp.stdout).unwrap();
    (keygen.stdout.trim().to_string(), cp_path)
}

/// `pmm-export --format html` of the workspace's ledger to `name`, with `args`.
fn export(pmm: &Pmm, name: &str, args: &[&str]) -> PathBuf {
    let out = pmm.path(name);
    ok(&pmm.run(
        "pmm-export",
        &[&["-o", out.to_str().unwrap()], args].concat(),
        "",
    ));
    out
}

/// What `pmm-verify` says of a file, and the ledger's root.
fn cli_verdict(pmm: &Pmm, file: &Path) -> Value {
    pmm.run("pmm-verify", &[file.to_str().unwrap()], "")
        .summary()
}

fn root(pmm: &Pmm) -> String {
    let r = pmm.run("pmm-verify", &["--root"], "");
    r.of_type("root")[0]["root"].as_str().unwrap().to_string()
}

#[test]
fn a_scripted_conversation_verifies_in_the_browser_as_pmm_verify_says() {
    let Some(chrome) = chromium("the report's browser test") else {
        return;
    };
    let pmm = Pmm::new();
    let (vkey, cp) = conversation(&pmm);
    let html = export(
        &pmm,
        "mind.html",
        &[
            "--embed-checkpoint",
            cp.to_str().unwrap(),
            "--key",
            &vkey,
            "--title",
            "Echo <3",
        ],
    );
    let cli = cli_verdict(&pmm, &html);
    assert_eq!(cli["ok"], true, "{cli}");
    let ledger = cli_verdict(&pmm, &pmm.db);
    for k in ["events", "last_hash", "erased", "sha256_full_digest"] {
        assert_eq!(
            cli[k], ledger[k],
            "pmm-verify says the same of the report and the ledger"
        );
    }
    let dom = dump_dom(&chrome, &html, "#search/weekly%20report", &[]);
    let v = verdict(&dom);
    assert_eq!(v["data-status"], "ok", "{v:?}");
    assert_eq!(v["data-events"], cli["events"].to_string());
    assert_eq!(v["data-head"], cli["last_hash"].as_str().unwrap());
    assert_eq!(v["data-root"], root(&pmm));
    assert_eq!(v["data-erased"], cli["erased"].to_string());
    assert_eq!(v["data-erased"], "4");
    assert_eq!(v["data-first-bad"], "");
    assert_eq!(v["data-checkpoint"], "verified", "{v:?}");
    assert!(v["data-ms"].parse::<u64>().is_ok(), "{v:?}");
    // The page's search finds a text of the conversation (the MCP client's commitment).
    assert!(
        dom.contains("<mark>weekly report</mark>"),
        "search found nothing"
    );
    assert!(
        dom.contains("<title>Echo &lt;3</title>"),
        "the title is text"
    );
    // The erased message is shown as erased, with who erased it and why; its text is gone.
    assert!(
        !dom.contains("hunter2"),
        "the erased text is not in the page"
    );
    let tl = dump_dom(&chrome, &html, "#timeline", &[]);
    assert!(
        tl.contains("the user asked to forget a secret"),
        "the erasure's reason"
    );
    assert!(
        tl.contains("thinking tick"),
        "the thinking tick's reply is marked"
    );
    assert!(tl.contains("decision: reflect"), "the tick's decision");

    // One byte of the embedded checkpoint's signature changed: the checkpoint fails, the
    // chain still verifies.
    let text = std::fs::read_to_string(&html).unwrap();
    // The page's JSON is ASCII: the em dash that opens a signature line is escaped.
    let signer = "\\u2014 test.example/agent ";
    let sig_at = text.find(signer).unwrap() + signer.len() + 20;
    let mut bytes = text.into_bytes();
    bytes[sig_at] = if bytes[sig_at] == b'A' { b'B' } else { b'A' };
    let bent = pmm.path("bent.html");
    std::fs::write(&bent, bytes).unwrap();
    let v = verdict(&dump_dom(&chrome, &bent, "", &[]));
    assert_eq!(v["data-checkpoint"], "failed", "{v:?}");
    assert_eq!(v["data-status"], "ok", "{v:?}");
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn the_reference_fixture_fails_in_the_browser_at_its_known_broken_link() {
    let Some(pmm) = Pmm::with_reference_ledger() else {
        return;
    };
    let Some(chrome) = chromium("the report's fixture test") else {
        return;
    };
    let html = export(&pmm, "gpt.html", &[]);
    let r = pmm.run("pmm-verify", &[html.to_str().unwrap()], "");
    assert_eq!(r.code, 1, "{r:?}");
    let first = r.findings().first().cloned().unwrap();
    assert_eq!(first, (json!(468), "broken_link".to_string()));
    let cli = r.summary();
    let v = verdict(&dump_dom(&chrome, &html, "", &[]));
    assert_eq!(v["data-status"], "failed");
    assert_eq!(v["data-first-bad"], "468");
    assert_eq!(v["data-events"], cli["events"].to_string());
    assert_eq!(v["data-events"], "1199");
    assert_eq!(v["data-head"], cli["last_hash"].as_str().unwrap());
    assert_eq!(v["data-root"], root(&pmm));
    assert_eq!(v["data-erased"], "0");
    assert_eq!(v["data-checkpoint"], "none");
}

/// xorshift64*: cases that are the same on every run for a given seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

/// The events block of a report, and where it is in the file.
fn events_block(text: &str) -> (usize, usize, Vec<Value>) {
    let open = pmm::interchange::report::EVENTS_OPEN;
    let start = text.find(open).unwrap() + open.len();
    let end = start + text[start..].find("</script>").unwrap();
    (start, end, serde_json::from_str(&text[start..end]).unwrap())
}

/// The events as the report writes them.
fn write_block(events: &[Value]) -> String {
    let mut b = Vec::new();
    b.push(b'[');
    for (i, ev) in events.iter().enumerate() {
        if i > 0 {
            b.extend_from_slice(b",\n");
        }
        b.extend_from_slice(format!("{{\"id\":{}", ev["id"]).as_bytes());
        for f in ["ts", "kind", "content", "meta", "prev_hash", "hash"] {
            b.extend_from_slice(format!(",\"{f}\":").as_bytes());
            match ev[f].as_str() {
                Some(s) => pmm::interchange::report::script_json_str(&mut b, s),
                None => b.extend_from_slice(b"null"),
            }
        }
        b.push(b'}');
    }
    b.push(b']');
    String::from_utf8(b).unwrap()
}

/// Positions of `s` where an ASCII letter or digit can change to another and the text still
/// means something else: not inside a `\uXXXX` escape or right after a backslash (in a meta,
/// which is JSON text, `\u00e9` and `\u00E9` are the same character), not an exponent's `e`.
fn changeable(s: &str, json_text: bool) -> Vec<usize> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if json_text && b[i] == b'\\' {
            i += if b.get(i + 1) == Some(&b'u') { 6 } else { 2 };
            continue;
        }
        let exponent =
            json_text && matches!(b[i], b'e' | b'E') && i > 0 && b[i - 1].is_ascii_digit();
        if b[i].is_ascii_alphanumeric() && !exponent {
            out.push(i);
        }
        i += 1;
    }
    out
}

#[test]
fn any_byte_changed_in_an_embedded_event_fails_at_that_event() {
    let Some(chrome) = chromium("the report's tampering test") else {
        return;
    };
    let pmm = Pmm::new();
    pmm.seed(40);
    let html = export(&pmm, "mind.html", &[]);
    let text = std::fs::read_to_string(&html).unwrap();
    let (start, end, events) = events_block(&text);
    let seed: u64 = std::env::var("PMM_REPORT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    eprintln!("tampering cases from PMM_REPORT_SEED={seed}");
    let mut rng = Rng(seed);
    let mut cases = Vec::new();
    let fields = ["content", "meta", "prev_hash", "hash"];
    while cases.len() < 10 {
        let i = rng.below(events.len());
        let f = fields[(cases.len() + rng.below(2)) % 4];
        let Some(value) = events[i][f].as_str() else {
            continue;
        };
        let spots = changeable(value, f == "meta");
        if spots.is_empty() {
            continue;
        }
        let at = spots[rng.below(spots.len())];
        let old = value.as_bytes()[at];
        let alnum = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let new = loop {
            let c = alnum[rng.below(alnum.len())];
            if c != old {
                break c;
            }
        };
        let mut changed = value.as_bytes().to_vec();
        changed[at] = new;
        let mut evs = events.clone();
        evs[i][f] = Value::String(String::from_utf8(changed).unwrap());
        let page = format!("{}{}{}", &text[..start], write_block(&evs), &text[end..]);
        let path = pmm.path(&format!("tampered-{}.html", cases.len()));
        std::fs::write(&path, page).unwrap();
        cases.push((
            path,
            evs[i]["id"].as_i64().unwrap(),
            f,
            at,
            old as char,
            new as char,
        ));
    }
    // Two Chromiums at a time (each takes a second or so).
    let results: Vec<_> = std::thread::scope(|s| {
        cases
            .chunks(2)
            .flat_map(|pair| {
                let hs: Vec<_> = pair
                    .iter()
                    .map(|c| s.spawn(|| verdict(&dump_dom(&chrome, &c.0, "", &[]))))
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap())
                    .collect::<Vec<_>>()
            })
            .collect()
    });
    for ((path, id, f, at, old, new), v) in cases.iter().zip(results) {
        let what = format!("event {id}'s {f}, byte {at}: {old:?} → {new:?}");
        assert_eq!(v["data-status"], "failed", "{what}: {v:?}");
        assert_eq!(v["data-first-bad"], id.to_string(), "{what}: {v:?}");
        // pmm-verify reads the same file and finds the same first event.
        let r = pmm.run("pmm-verify", &[path.to_str().unwrap()], "");
        let first = r.findings().iter().filter_map(|(i, _)| i.as_i64()).min();
        assert_eq!(first, Some(*id), "{what}: pmm-verify {r:?}");
    }
}

/// Ledger text that tries to break out of the page, as content, meta and kind.
fn hostile_rows() -> Vec<Value> {
    let attacks = [
        "</script><script>document.body.setAttribute('data-pwned','1')</script>",
        "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">",
        "<a href=\"javascript:document.body.setAttribute('data-pwned','3')\">click</a>",
        "<output id=\"pmm-verdict\" data-status=\"ok\" data-first-bad=\"\">forged</output>",
        "<!-- <script> unterminated",
        "\u{202e}evil\u{202c} and \u{2028} \u{2029} bidi and line separators",
        "]</script><script>alert(1)</script>",
    ];
    let mut rows = Vec::new();
    for (i, a) in attacks.iter().enumerate() {
        rows.push(
            json!({"id": 0, "ts": "2025-11-24T05:55:41.194157Z", "kind": "user_message",
            "content": a, "meta": {"role": "user", "note": a}}),
        );
        rows.push(
            json!({"id": 0, "ts": "2025-11-24T05:55:41.194157Z", "kind": format!("k{i}{a}"),
            "content": format!("kind attack {i}"), "meta": {}}),
        );
    }
    rows.push(
        json!({"id": 0, "ts": "2025-11-24T05:55:41.194157Z", "kind": "assistant_message",
        "content": format!("{}</script>", "x".repeat(1 << 20)), "meta": {"role": "assistant"}}),
    );
    for (n, r) in rows.iter_mut().enumerate() {
        r["id"] = json!(n + 1);
    }
    rows
}

#[test]
fn hostile_ledger_text_is_shown_as_text_and_runs_nothing() {
    let Some(chrome) = chromium("the report's hostile-content test") else {
        return;
    };
    let pmm = Pmm::new();
    let mut rows = hostile_rows();
    let jsonl = pmm.path("hostile.jsonl");
    std::fs::write(&jsonl, harness::rechain(&mut rows)).unwrap();
    ok(&pmm.run("pmm-append", &["--import", jsonl.to_str().unwrap()], ""));
    let html = export(
        &pmm,
        "mind.html",
        &["--title", "</title><script>alert(1)</script>"],
    );
    let text = std::fs::read_to_string(&html).unwrap();
    // No ledger text can end the events block: the only </script> after it is its own end.
    let (start, end, events) = events_block(&text);
    assert_eq!(events.len(), rows.len());
    assert!(
        !text[start..end].contains('<'),
        "a raw '<' in the events block"
    );
    let cli = cli_verdict(&pmm, &html);
    assert_eq!(cli["ok"], true, "{cli}");
    assert_eq!(cli["events"], json!(rows.len()));
    for view in ["#timeline", "#search/data-pwned", "#integrity-view"] {
        let mut dom = dump_dom(&chrome, &html, view, &[]);
        let v = verdict(&dom);
        assert_eq!(v["data-status"], "ok", "{view}: {v:?}");
        assert_eq!(v["data-events"], rows.len().to_string());
        assert!(!dom.contains("data-pwned=\""), "{view}: a script ran");
        // The events block itself holds the text escaped; outside it, every '<' of the
        // ledger is an &lt; in a text node: no element came from the data.
        let (s, e, _) = events_block(&dom);
        dom.replace_range(s..e, "");
        for tag in [
            "<img",
            "<a href=\"javascript",
            "<script>document",
            "<script>alert",
            "forged</output>",
        ] {
            assert!(!dom.contains(tag), "{view}: {tag} became markup");
        }
        if view != "#integrity-view" {
            assert!(
                dom.contains("&lt;img src=x onerror="),
                "{view}: the text is shown"
            );
        }
    }
}

#[test]
fn the_page_makes_no_request_and_its_policy_refuses_them() {
    let Some(chrome) = chromium("the report's network test") else {
        return;
    };
    let pmm = Pmm::new();
    pmm.seed(12);
    let html = export(&pmm, "mind.html", &[]);
    let text = std::fs::read_to_string(&html).unwrap();
    let csp = pmm::interchange::report::content_security_policy();
    assert!(
        text.contains(&format!("content=\"{}\"", csp.replace('\'', "&#39;"))),
        "the CSP meta"
    );
    for must in [
        "default-src 'none'",
        "connect-src 'none'",
        "img-src data:",
        "base-uri 'none'",
        "form-action 'none'",
    ] {
        assert!(csp.contains(must), "{csp} lacks {must}");
    }
    assert!(!csp.contains("http"), "{csp}");
    // The one source with "unsafe" in its name lets the page's own scripts compile
    // WebAssembly (the SHA-256 module, whose digest verify.js pins): never inline script,
    // `eval` or inline event handlers.
    assert_eq!(csp.matches("unsafe").count(), 1, "{csp}");
    assert!(csp.contains("script-src 'wasm-unsafe-eval' "), "{csp}");
    // Chromium's own network log of a load that visits every view: nothing the page asked for
    // (the browser's own update and account checks are "not an origin").
    let log = pmm.path("net.json");
    for view in [
        "#timeline",
        "#why",
        "#commitments",
        "#self",
        "#concepts",
        "#cost",
        "#search/event",
        "#integrity-view",
    ] {
        let dom = dump_dom(
            &chrome,
            &html,
            view,
            &[format!("--log-net-log={}", log.display())],
        );
        assert_eq!(verdict(&dom)["data-status"], "ok");
        let net: Value = serde_json::from_str(&std::fs::read_to_string(&log).unwrap()).unwrap();
        for e in net["events"].as_array().unwrap() {
            let (Some(url), Some(init)) = (
                e["params"]["url"].as_str(),
                e["params"]["initiator"].as_str(),
            ) else {
                continue;
            };
            assert!(
                init == "not an origin" || url.starts_with("file:"),
                "{view}: the page requested {url} ({init})"
            );
        }
        // Every link of the page stays on it.
        for href in dom.split(" href=\"").skip(1) {
            assert!(
                href.starts_with('#'),
                "{view}: a link out: {}",
                &href[..href.len().min(60)]
            );
        }
        assert!(
            !dom.contains(" src=\""),
            "{view}: an element loads something"
        );
    }
    // The policy at work: a copy of the page with an image, a style sheet and a script that
    // fetches, all pointed at a local server (the script allowed by its hash, the policy
    // otherwise the page's own): the server hears nothing and the fetch is refused.
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    server.set_nonblocking(true).unwrap();
    let url = format!("http://127.0.0.1:{}", server.local_addr().unwrap().port());
    let probe = format!(
        "fetch('{url}/fetch').then(()=>document.body.setAttribute('data-fetch','allowed'),()=>document.body.setAttribute('data-fetch','refused'))"
    );
    let hash = {
        use base64::Engine as _;
        use sha2::Digest as _;
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(probe.as_bytes()))
    };
    let bent = text
        .replacen("script-src ", &format!("script-src &#39;sha256-{hash}&#39; "), 1)
        .replacen(
            "<main id=\"main\"",
            &format!("<img src=\"{url}/img\"><link rel=\"stylesheet\" href=\"{url}/css\"><script>{probe}</script><main id=\"main\""),
            1,
        );
    let probe_page = pmm.path("probe.html");
    std::fs::write(&probe_page, bent).unwrap();
    let dom = dump_dom(&chrome, &probe_page, "", &[]);
    assert!(
        dom.contains("data-fetch=\"refused\""),
        "the fetch was not refused"
    );
    assert!(server.accept().is_err(), "the page connected to {url}");
}

/// The Rust side of the browser unit tests: the canonical JSON corpora, floats as
/// `canon::float_repr` writes them, what it refuses, escaping, Go's Merkle roots and signed
/// note, and chains whose findings `pmm-verify` gives.
fn unit_cases(pmm: &Pmm) -> (Value, Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut canon = Vec::new();
    let mut corpora = vec![root.join("tests/data/canon-corpus.jsonl")];
    corpora.extend(harness::fixture_path("canonical-json/cases.jsonl"));
    for path in corpora {
        for line in std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
        {
            canon.push(serde_json::from_str::<Value>(line).unwrap());
        }
    }
    let mut floats: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        100.0,
        0.1,
        1e16,
        1.5e16,
        9999999999999998.0,
        1e-4,
        1e-5,
        1.2345678901234567e19,
        5e-324,
        1.7976931348623157e308,
        123456.789,
        1e15 + 0.25,
        -(999999999999999.0 + 0.25),
        562949953421312.0 + 0.75,
        2f64.powi(-24),
        0.3,
        2.0 / 3.0,
    ];
    let mut rng = Rng(0x1234_5678_9abc_def1);
    while floats.len() < 2000 {
        let bits = ((rng.below(1 << 30) as u64) << 34)
            ^ ((rng.below(1 << 30) as u64) << 4)
            ^ rng.below(16) as u64;
        let f = f64::from_bits(bits);
        if f.is_finite() {
            floats.push(f);
        }
        // Numbers with few digits too, where ties happen.
        floats.push(rng.below(1 << 20) as f64 / 64.0 + 1e15);
    }
    let floats: Vec<Value> = floats
        .iter()
        .map(|f| json!([format!("{f:e}"), pmm::canon::float_repr(*f)]))
        .collect();
    let refused = [
        r#"{"a":NaN}"#,
        r#"{"a":1e400}"#,
        r#"{"a":"\ud800"}"#,
        "[1]",
        r#"{"a":1,}"#,
        "{'a':1}",
        r#"{"a":01}"#,
        r#"{"a":1} x"#,
        "{\"a\":\"\u{1}\"}",
    ];
    let escaped = vec![
        "</script><script>".to_string(),
        "<!--".into(),
        "a&b>c".into(),
        "\u{2028}\u{2029}".into(),
        "\u{0}\u{1f}\u{7f}\"\\".into(),
        "é😀\u{202e}".into(),
    ];
    let go: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/fixtures/merkle/go-vectors.json")).unwrap(),
    )
    .unwrap();
    let cases = json!({
        "canon": canon,
        "floats": floats,
        "refused": refused,
        "escaped": escaped,
        "merkle": {"leaves": go["leaf_data"], "roots": go["roots"]},
        "note": {"key": go["verifier_key"], "note": go["signed_note"]},
        "chains": chains(pmm),
    });
    (cases, escaped)
}

/// Chains broken in the ways `pmm-verify` names, with its findings (`id:problem`, sorted).
fn chains(pmm: &Pmm) -> Vec<Value> {
    pmm.seed(12);
    let r = pmm.run("pmm-export", &["--format", "json"], "");
    ok(&r);
    let events: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    let mut swapped = events.clone();
    swapped.swap(4, 5);
    let mut deleted = events.clone();
    deleted.remove(6);
    let mut repeated = events.clone();
    repeated.insert(5, events[4].clone());
    let mut unerased = events.clone();
    unerased[7]["content"] = json!("");
    unerased[7]["meta"] = json!("{}");
    let mut genesis = events.clone();
    genesis[0]["prev_hash"] = events[3]["hash"].clone();
    let mut out = Vec::new();
    for (name, evs) in [
        ("clean", events),
        ("swapped", swapped),
        ("deleted", deleted),
        ("repeated", repeated),
        ("unerased", unerased),
        ("genesis", genesis),
    ] {
        let path = pmm.path(&format!("{name}.json"));
        std::fs::write(&path, serde_json::to_string(&evs).unwrap()).unwrap();
        let v = pmm.run("pmm-verify", &[path.to_str().unwrap()], "");
        let mut found: Vec<String> = v
            .findings()
            .iter()
            .map(|(id, p)| format!("{id}:{p}"))
            .collect();
        found.sort();
        out.push(json!({"name": name, "events": evs, "findings": found.join(","), "erased": v.summary()["erased"].as_u64().unwrap_or(0)}));
    }
    out
}

/// JSON for a `<script type="application/json">` block.
fn script_json(v: &Value) -> String {
    v.to_string().replace('<', "\\u003c")
}

#[test]
fn the_verifier_script_passes_its_unit_tests_in_the_browser() {
    let Some(chrome) = chromium("the report's script unit tests") else {
        return;
    };
    let pmm = Pmm::new();
    let (cases, escaped) = unit_cases(&pmm);
    let mut esc = b"[".to_vec();
    for (i, s) in escaped.iter().enumerate() {
        if i > 0 {
            esc.push(b',');
        }
        pmm::interchange::report::script_json_str(&mut esc, s);
    }
    esc.push(b']');
    let page = format!(
        "<!doctype html><meta charset=\"utf-8\"><title>verify.js</title><output id=\"unit-results\"></output>\
         <script type=\"application/json\" id=\"unit-cases\">{}</script>\
         <script type=\"application/json\" id=\"unit-escaped\">{}</script>\
         <script type=\"application/wasm\" id=\"pmm-sha256-wasm\">{}</script>\
         <script>{}</script><script>{}</script>",
        script_json(&cases),
        String::from_utf8(esc).unwrap(),
        pmm::interchange::report::sha256_wasm_base64(),
        pmm::interchange::report::VERIFY_JS,
        include_str!("report_unit.js"),
    );
    let path = pmm.path("unit.html");
    std::fs::write(&path, page).unwrap();
    let dom = dump_dom(&chrome, &path, "", &[]);
    let r = attributes(&dom, "<output id=\"unit-results\"");
    assert_eq!(
        r.get("data-done").map(String::as_str),
        Some("1"),
        "the unit page did not finish: {dom:.2000}"
    );
    let body = &dom[dom.find("<output id=\"unit-results\"").unwrap()..];
    let body = &body[..body.find("</output>").unwrap()];
    assert_eq!(r["data-fail"], "0", "{body}");
    let passed: usize = r["data-pass"].parse().unwrap();
    eprintln!("{passed} checks passed in the browser");
    assert!(passed > 10_000, "{passed} checks only");
}

#[test]
fn ci_verify_writes_the_report_as_an_artifact_in_both_modes() {
    let pmm = Pmm::new();
    pmm.seed(9);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ci-verify.sh");
    let ci = |args: &[&str]| {
        let out = std::process::Command::new("sh")
            .arg(&script)
            .args(args)
            .current_dir(pmm.dir.path())
            .env("PMM_VERIFY", assert_cmd::cargo::cargo_bin("pmm-verify"))
            .env("PMM_EXPORT", assert_cmd::cargo::cargo_bin("pmm-export"))
            .env("PMM_APPEND", assert_cmd::cargo::cargo_bin("pmm-append"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    // An export and its anchors: the report is of the export's events.
    let export = pmm.path("ledger.json.gz");
    ok(&pmm.run("pmm-export", &["-o", export.to_str().unwrap()], ""));
    let plain = pmm.path("plain.html");
    ci(&[
        "--report",
        plain.to_str().unwrap(),
        export.to_str().unwrap(),
    ]);
    let s = cli_verdict(&pmm, &plain);
    assert_eq!(
        (s["ok"].clone(), s["events"].clone()),
        (json!(true), json!(9)),
        "{s}"
    );
    // Signed: the report embeds the checkpoint just signed.
    let key = pmm.path("log.key");
    let r = pmm.run(
        "pmm-export",
        &["--keygen", "ci.test/log", "--key", key.to_str().unwrap()],
        "",
    );
    ok(&r);
    let vkey = r.stdout.trim().to_string();
    let signed = pmm.path("signed.html");
    let db = pmm.db.to_str().unwrap().to_string();
    ci(&[
        "--report",
        signed.to_str().unwrap(),
        "--signed",
        key.to_str().unwrap(),
        &vkey,
        &db,
    ]);
    let text = std::fs::read_to_string(&signed).unwrap();
    assert!(
        text.contains("id=\"pmm-checkpoint\""),
        "the checkpoint is embedded"
    );
    let Some(chrome) = chromium("the CI report's browser check") else {
        return;
    };
    let v = verdict(&dump_dom(&chrome, &signed, "", &[]));
    assert_eq!(
        (v["data-status"].as_str(), v["data-checkpoint"].as_str()),
        ("ok", "verified"),
        "{v:?}"
    );
}

#[test]
fn a_report_refuses_what_would_make_it_lie_before_writing_anything() {
    let pmm = Pmm::new();
    pmm.seed(5);
    let out = pmm.path("mind.html");
    let o = out.to_str().unwrap();
    pmm.run("pmm-export", &["-o", o, "--kind", "user_message"], "")
        .assert_error("pmm-export", &["--kind", "chain"]);
    pmm.run("pmm-export", &["--format", "jsonl", "--title", "x"], "")
        .assert_error("pmm-export", &["--format html"]);
    // A checkpoint that does not open with the key, and one about events outside the window.
    let key = pmm.path("k.key");
    let r = pmm.run(
        "pmm-export",
        &["--keygen", "t.example/a", "--key", key.to_str().unwrap()],
        "",
    );
    ok(&r);
    let vkey = r.stdout.trim().to_string();
    let cp = pmm.run(
        "pmm-export",
        &["--checkpoint", "--key", key.to_str().unwrap()],
        "",
    );
    let cp_path = pmm.path("cp.txt");
    std::fs::write(&cp_path, cp.stdout.replace("\n5\n", "\n4\n")).unwrap();
    let c = cp_path.to_str().unwrap();
    pmm.run(
        "pmm-export",
        &["-o", o, "--embed-checkpoint", c, "--key", &vkey],
        "",
    )
    .assert_error("pmm-export", &["--embed-checkpoint", "signature"]);
    std::fs::write(&cp_path, &cp.stdout).unwrap();
    pmm.run(
        "pmm-export",
        &[
            "-o",
            o,
            "--embed-checkpoint",
            c,
            "--key",
            &vkey,
            "--since",
            "2",
        ],
        "",
    )
    .assert_error("pmm-export", &["events 1 to 5"]);
    assert!(!out.exists(), "nothing was written");
    // The private key file works too: only its verifier key is embedded.
    ok(&pmm.run(
        "pmm-export",
        &[
            "-o",
            o,
            "--embed-checkpoint",
            c,
            "--key",
            key.to_str().unwrap(),
        ],
        "",
    ));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains(&vkey) && !text.contains("PRIVATE+KEY"),
        "the verifier key only"
    );
}

#[test]
fn the_page_hashes_in_webassembly_where_it_can_and_in_javascript_alike() {
    let Some(chrome) = chromium("the report's two SHA-256s") else {
        return;
    };
    let pmm = Pmm::new();
    pmm.seed(40);
    let html = export(&pmm, "mind.html", &[]);
    let cli = cli_verdict(&pmm, &html);
    let same = |v: &BTreeMap<String, String>, how: &str| {
        assert_eq!(v["data-status"], "ok", "{how}");
        assert_eq!(v["data-events"], cli["events"].to_string(), "{how}");
        assert_eq!(v["data-head"], cli["last_hash"].as_str().unwrap(), "{how}");
        assert_eq!(v["data-root"], root(&pmm), "{how}");
    };
    let page = verdict(&dump_dom(&chrome, &html, "", &[]));
    same(&page, "the page as exported");
    assert_eq!(page["data-sha"], "wasm", "the module did not load");
    // A browser that will not compile WebAssembly (V8 without a compiler) checks in JavaScript.
    let jitless = verdict(&dump_dom(
        &chrome,
        &html,
        "",
        &["--js-flags=--jitless".to_string()],
    ));
    same(&jitless, "--jitless");
    assert_eq!(jitless["data-sha"], "js");
    // A module that is not the pinned one is not run: one base64 letter changed.
    let text = std::fs::read_to_string(&html).unwrap();
    let open = "id=\"pmm-sha256-wasm\">";
    let at = text.find(open).unwrap() + open.len() + 100;
    let letter = if &text[at..=at] == "A" { "B" } else { "A" };
    let bent = pmm.path("bent.html");
    std::fs::write(&bent, format!("{}{letter}{}", &text[..at], &text[at + 1..])).unwrap();
    let dom = dump_dom(&chrome, &bent, "", &[]);
    let other = verdict(&dom);
    same(&other, "a changed module");
    assert_eq!(other["data-sha"], "js");
    // The banner says which SHA-256 checked the page, and why not the module.
    let facts = |dom: &str| {
        let at = dom.find("<dl id=\"integrity-facts\"").unwrap();
        dom[at..at + dom[at..].find("</dl>").unwrap()].to_string()
    };
    assert!(
        facts(&dom).contains("SHA-256 in JavaScript (the module is not the pinned one)"),
        "{}",
        facts(&dom)
    );
    let exported = dump_dom(&chrome, &html, "", &[]);
    assert!(facts(&exported).contains("SHA-256 in WebAssembly"));
}
