//! The programs as Unix tools: pipes (closed early, streamed, composed), output that round
//! trips, filters, files, the pinned clock, metrics, help, versions and completions.

use crate::harness::{Pmm, Run};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const PINNED_TS: &str = "2025-11-24T05:55:41.194157Z";
const PROGRAMS: [&str; 4] = ["pmm-append", "pmm-verify", "pmm-export", "pmm-metrics"];

/// A std Command for `prog` with the harness environment (ledger, pinned clock).
fn command(pmm: &Pmm, prog: &str) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin(prog));
    c.current_dir(pmm.dir.path())
        .env_remove("RUST_BACKTRACE")
        .env("PMM_DB", &pmm.db)
        .env("PMM_NOW", PINNED_TS);
    c
}

/// Runs `script` with `sh -c`, the programs on the PATH, in the workspace.
fn sh(pmm: &Pmm, script: &str) -> Run {
    let bin = assert_cmd::cargo::cargo_bin("pmm-append");
    let dir = bin.parent().unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(pmm.dir.path())
        .env_remove("RUST_BACKTRACE")
        .env("PATH", path)
        .env("PMM_DB", &pmm.db)
        .env("PMM_NOW", PINNED_TS)
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `n` events appended in one `--batch`, a metrics_turn every tenth.
fn seed_batch(pmm: &Pmm, n: usize) {
    let mut input = String::with_capacity(n * 80);
    for i in 1..=n {
        let kind = if i % 10 == 0 {
            "metrics_turn"
        } else {
            "user_message"
        };
        input.push_str(&format!(
            "{{\"kind\":\"{kind}\",\"content\":\"message {i} with some text to make the line longer\",\"meta\":{{\"i\":{i}}}}}\n"
        ));
    }
    let r = pmm.run("pmm-append", &["--batch"], &input);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// Spawns `prog args`, reads one line of its stdout, closes the pipe, waits.
/// Returns (the line, exit code, stderr).
fn first_line_then_close(pmm: &Pmm, prog: &str, args: &[&str]) -> (String, Option<i32>, String) {
    let mut child = command(pmm, prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    {
        let mut out = BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        // Dropping the reader closes our end, as `head -1` does when it exits.
    }
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    (line, status.code(), err)
}

#[test]
fn closed_stdout_ends_every_reader_quietly() {
    let pmm = Pmm::new();
    seed_batch(&pmm, 5000);

    let (line, code, err) = first_line_then_close(&pmm, "pmm-export", &["--format", "jsonl"]);
    let first: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(first["id"], 1);
    assert_eq!((code, err.as_str()), (Some(0), ""), "pmm-export");

    let (line, code, err) = first_line_then_close(&pmm, "pmm-export", &["--format", "json"]);
    assert_eq!(line, "[\n");
    assert_eq!((code, err.as_str()), (Some(0), ""), "pmm-export json");

    // pmm-verify prints one line per finding: give it 5,000 of them.
    let r = pmm.run("pmm-export", &["--format", "jsonl"], "");
    let damaged = r
        .stdout
        .replace("\"content\":\"message", "\"content\":\"Message");
    std::fs::write(pmm.path("damaged.jsonl"), damaged).unwrap();
    let (line, code, err) = first_line_then_close(&pmm, "pmm-verify", &["damaged.jsonl"]);
    let first: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (first["id"].as_i64(), first["problem"].as_str()),
        (Some(1), Some("hash_mismatch"))
    );
    assert_eq!((code, err.as_str()), (Some(0), ""), "pmm-verify");

    let (line, code, err) = first_line_then_close(&pmm, "pmm-verify", &[]);
    assert!(line.contains("\"summary\""), "{line}");
    assert_eq!((code, err.as_str()), (Some(0), ""), "pmm-verify --db");

    let (line, code, err) = first_line_then_close(&pmm, "pmm-metrics", &["--diag"]);
    let first: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        first["id"], 4960,
        "the fifth-newest metrics_turn comes first"
    );
    assert_eq!((code, err.as_str()), (Some(0), ""), "pmm-metrics --diag");

    // And through a real shell pipeline.
    let r = sh(&pmm, "pmm-export --format jsonl | head -1");
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(r.stdout.lines().count(), 1);
}

#[test]
fn appended_events_are_printed_exactly_as_export_prints_them() {
    let pmm = Pmm::new();
    let input = concat!(
        r#"{"kind":"user_message","content":"héllo \"you\"\n😀 \u0001","meta":{"role":"user","z":[1,2.5,null,true]}}"#,
        "\n",
        r#"{"kind":"assistant_message","content":"","meta":{"n":12345678901234567890123,"f":1e-7,"s":"\u00e9"}}"#,
        "\n",
        r#"{"kind":"reflection","content":"no meta"}"#,
        "\n",
    );
    let streamed = pmm.run("pmm-append", &[], input);
    assert_eq!(streamed.code, 0, "{streamed:?}");
    let batched = pmm.run("pmm-append", &["--batch"], input);
    assert_eq!(batched.code, 0, "{batched:?}");
    let export = pmm.run("pmm-export", &["--format", "jsonl"], "");
    assert_eq!(export.code, 0);
    assert_eq!(
        export.stdout,
        format!("{}{}", streamed.stdout, batched.stdout),
        "pmm-append and pmm-export must print the same bytes"
    );
    let evs = export.records();
    assert_eq!(evs.len(), 6);
    assert_eq!(evs[0]["content"], "héllo \"you\"\n😀 \u{1}");
    assert_eq!(evs[2]["meta"], json!({}));
    assert_eq!(evs[3]["prev_hash"], evs[2]["hash"]);
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn single_event_mode_appends_exactly_one_event_with_the_reference_hash() {
    let pmm = Pmm::new();
    // stdin is not read in this mode.
    let r = pmm.run(
        "pmm-append",
        &[
            "--kind",
            "user_message",
            "--content",
            "hi é",
            "--meta",
            r#"{"role":"user","a":1}"#,
        ],
        "{\"kind\":\"user_message\",\"content\":\"from stdin\"}\n",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let evs = r.records();
    assert_eq!(evs.len(), 1);
    let e = &evs[0];
    assert_eq!(e["id"], 1);
    assert_eq!(e["ts"], PINNED_TS);
    assert_eq!(e["kind"], "user_message");
    assert_eq!(e["content"], "hi é");
    assert_eq!(e["meta"], json!({"a": 1, "role": "user"}));
    assert_eq!(e["prev_hash"], Value::Null);
    // sha256 of CPython's json.dumps(..., sort_keys=True, separators=(",", ":")).
    let payload = r#"{"content":"hi \u00e9","kind":"user_message","meta":{"a":1,"role":"user"},"prev_hash":null}"#;
    let h1 = sha256_hex(payload.as_bytes());
    assert_eq!(e["hash"], h1.as_str());

    // Without --meta and --content: meta {} and content "".
    let r = pmm.run("pmm-append", &["--kind", "reflection"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let e = &r.records()[0];
    assert_eq!(
        (e["id"].as_i64(), e["content"].as_str()),
        (Some(2), Some(""))
    );
    assert_eq!(e["meta"], json!({}));
    assert_eq!(e["prev_hash"], h1.as_str());
    let payload = format!(r#"{{"content":"","kind":"reflection","meta":{{}},"prev_hash":"{h1}"}}"#);
    assert_eq!(e["hash"], sha256_hex(payload.as_bytes()).as_str());
    assert_eq!(pmm.count(), 2);
}

#[test]
fn streaming_append_prints_each_event_before_stdin_closes() {
    let pmm = Pmm::new();
    let mut child = command(&pmm, "pmm-append")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    for i in 1..=3 {
        writeln!(stdin, r#"{{"kind":"user_message","content":"live {i}"}}"#).unwrap();
        stdin.flush().unwrap();
        // stdin is still open: the event must come out now, committed.
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("event {i} not printed while stdin is open"));
        let e: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(e["id"], i);
        assert_eq!(e["content"], format!("live {i}"));
        assert_eq!(pmm.count(), i as u64, "event {i} must be committed already");
    }
    drop(stdin);
    let status = child.wait().unwrap();
    reader.join().unwrap();
    assert!(status.success());
    assert!(rx.try_recv().is_err(), "nothing more was printed");
}

#[test]
fn export_piped_into_append_copies_the_ledger_with_identical_hashes() {
    let pmm = Pmm::new();
    pmm.seed(12);
    let original = pmm.run("pmm-export", &["--format", "jsonl"], "").stdout;
    // The same clock: byte-identical exports.
    let r = sh(
        &pmm,
        "pmm-export --format jsonl | pmm-append --db copy.db > /dev/null && pmm-export --db copy.db --format jsonl",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, original);
    let r = pmm.run("pmm-verify", &["copy.db"], "");
    assert_eq!(r.code, 0, "{r:?}");

    // Another clock: only ts differs (it is not hashed).
    let r = sh(
        &pmm,
        "pmm-export --format jsonl | PMM_NOW=2030-01-01T00:00:00Z pmm-append --db later.db",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let copy = r.records();
    let orig: Vec<Value> = original
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(copy.len(), orig.len());
    for (c, o) in copy.iter().zip(&orig) {
        for k in ["id", "kind", "content", "meta", "prev_hash", "hash"] {
            assert_eq!(c[k], o[k], "{k}");
        }
        assert_eq!(c["ts"], "2030-01-01T00:00:00.000000Z");
    }

    // Ids and hashes in the input are ignored: the chain is the ledger's own.
    let bogus = r#"{"id":999,"ts":"x","kind":"user_message","content":"c","meta":{},"prev_hash":"00","hash":"11"}"#;
    let fresh = Pmm::new();
    let r = fresh.run("pmm-append", &[], &format!("{bogus}\n"));
    assert_eq!(r.code, 0, "{r:?}");
    let e = &r.records()[0];
    assert_eq!(e["id"], 1);
    assert_eq!(e["ts"], PINNED_TS);
    assert_eq!(e["prev_hash"], Value::Null);
    let payload = r#"{"content":"c","kind":"user_message","meta":{},"prev_hash":null}"#;
    assert_eq!(e["hash"], sha256_hex(payload.as_bytes()).as_str());
}

fn exported_ids(pmm: &Pmm, args: &[&str]) -> Vec<i64> {
    let mut all = vec!["--format", "jsonl"];
    all.extend_from_slice(args);
    let r = pmm.run("pmm-export", &all, "");
    assert_eq!(r.code, 0, "{args:?}: {r:?}");
    r.records()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect()
}

#[test]
fn export_filters_by_range_and_kind() {
    let pmm = Pmm::new();
    pmm.seed(12); // kinds cycle user, assistant, reflection, metrics_turn
    assert_eq!(exported_ids(&pmm, &[]), (1..=12).collect::<Vec<_>>());
    assert_eq!(
        exported_ids(&pmm, &["--since", "3", "--until", "7"]),
        [3, 4, 5, 6, 7]
    );
    assert_eq!(exported_ids(&pmm, &["--since", "10"]), [10, 11, 12]);
    assert_eq!(exported_ids(&pmm, &["--until", "2"]), [1, 2]);
    assert_eq!(exported_ids(&pmm, &["--since", "5", "--until", "5"]), [5]);
    assert_eq!(exported_ids(&pmm, &["--kind", "reflection"]), [3, 7, 11]);
    assert_eq!(
        exported_ids(&pmm, &["--kind", "reflection", "--kind", "metrics_turn"]),
        [3, 4, 7, 8, 11, 12]
    );
    assert_eq!(
        exported_ids(&pmm, &["--since", "5", "--kind", "reflection"]),
        [7, 11]
    );
    assert!(exported_ids(&pmm, &["--since", "13"]).is_empty());
    assert!(exported_ids(&pmm, &["--kind", "violation"]).is_empty());
    // The JSON export honours the filters too.
    let r = pmm.run(
        "pmm-export",
        &["--format", "json", "--kind", "reflection"],
        "",
    );
    let arr: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    let ids: Vec<i64> = arr.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [3, 7, 11]);
}

fn gunzip(path: &std::path::Path) -> String {
    let mut gz = flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap());
    let mut s = String::new();
    gz.read_to_string(&mut s).unwrap();
    s
}

#[test]
fn gzip_output_is_gzip_and_verifies() {
    let pmm = Pmm::new();
    pmm.seed(12);
    for (name, format) in [("out.jsonl.gz", "jsonl"), ("out.json.gz", "json")] {
        let r = pmm.run("pmm-export", &["-o", name], "");
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stdout.is_empty(), "-o writes nothing to stdout");
        let path = pmm.path(name);
        assert_eq!(&std::fs::read(&path).unwrap()[..2], &[0x1f, 0x8b], "{name}");
        let plain = pmm.run("pmm-export", &["--format", format], "").stdout;
        assert_eq!(gunzip(&path), plain, "{name}: the format follows the name");
        let r = pmm.run("pmm-verify", &[name], "");
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.summary()["events"], 12);
    }
    // An explicit --format wins over the name.
    let r = pmm.run("pmm-export", &["--format", "jsonl", "-o", "x.json.gz"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(gunzip(&pmm.path("x.json.gz")).starts_with("{\"id\":1,"));
}

fn leftovers(pmm: &Pmm) -> Vec<String> {
    std::fs::read_dir(pmm.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".pmm-export"))
        .collect()
}

#[test]
fn failed_export_leaves_no_file() {
    let pmm = Pmm::new();
    pmm.seed(4);
    let r = pmm.run("pmm-export", &["-o", "no/such/dir/out.json"], "");
    r.assert_error("pmm-export", &["no/such/dir"]);
    assert!(!pmm.path("no").exists());
    // A target that cannot be replaced (a directory): it stays as it was, no temp file stays.
    std::fs::create_dir(pmm.path("taken.json")).unwrap();
    std::fs::write(pmm.path("taken.json/keep"), "x").unwrap();
    let r = pmm.run("pmm-export", &["-o", "taken.json"], "");
    r.assert_error("pmm-export", &["taken.json"]);
    assert!(pmm.path("taken.json/keep").exists());
    assert!(leftovers(&pmm).is_empty(), "{:?}", leftovers(&pmm));
    // A refused export does not clobber an existing file either.
    std::fs::write(pmm.path("old.json"), "old").unwrap();
    let r = pmm.run("pmm-export", &["--kind", "bogus", "-o", "old.json"], "");
    assert_eq!(r.code, 2);
    assert_eq!(
        std::fs::read_to_string(pmm.path("old.json")).unwrap(),
        "old"
    );
}

#[test]
fn pmm_now_pins_the_timestamp() {
    let pmm = Pmm::new();
    let evs = pmm.seed(3);
    assert!(evs.iter().all(|e| e["ts"] == PINNED_TS), "{evs:?}");
    // --now wins over $PMM_NOW, and any offset is converted to UTC.
    let r = pmm.run(
        "pmm-append",
        &[
            "--kind",
            "user_message",
            "--now",
            "2025-01-02T03:04:05+01:00",
        ],
        "",
    );
    assert_eq!(r.records()[0]["ts"], "2025-01-02T02:04:05.000000Z");
    // Unpinned: the system clock, in the ledger's format.
    let out = pmm
        .cmd("pmm-append")
        .env_remove("PMM_NOW")
        .args(["--kind", "user_message"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ts = e["ts"].as_str().unwrap();
    assert_eq!(ts.len(), 27, "{ts}");
    assert!(
        ts.ends_with('Z') && &ts[10..11] == "T" && &ts[19..20] == ".",
        "{ts}"
    );
    let year: i32 = ts[..4].parse().unwrap();
    assert!(year >= 2025, "{ts}");
    assert_ne!(ts, PINNED_TS);
    // A clock that is not a time is a one-line usage error; nothing is written.
    let out = pmm
        .cmd("pmm-append")
        .env("PMM_NOW", "yesterday")
        .args(["--kind", "user_message"])
        .output()
        .unwrap();
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    r.assert_error("pmm-append", &["PMM_NOW", "yesterday"]);
    assert_eq!(pmm.count(), 5);
}

#[test]
fn metrics_append_is_idempotent() {
    let pmm = Pmm::new();
    let evs = pmm.seed(12);
    let r = pmm.run("pmm-metrics", &["--append", "--deterministic"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let recs = r.records();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(recs[0]["type"], "metrics");
    let update = &recs[1];
    assert_eq!(update["kind"], "metrics_update");
    assert_eq!(update["id"], 13);
    assert_eq!(
        update["content"],
        format!(
            "{{event_count:12,kinds:{{assistant_message:3,metrics_turn:3,reflection:3,user_message:3}},broken_links:0,open_commitments:0,closed_commitments:0,last_hash:{}}}",
            evs[11]["hash"].as_str().unwrap()
        )
    );
    // Nothing changed: nothing appended.
    let again = pmm.run("pmm-metrics", &["--append", "--deterministic"], "");
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(again.records().len(), 1);
    assert_eq!(again.records()[0], recs[0]);
    assert_eq!(pmm.count(), 13);
    // A new event changes the metrics: one more update.
    pmm.run("pmm-append", &["--kind", "user_message"], "");
    let third = pmm.run("pmm-metrics", &["--append"], "");
    assert_eq!(third.records().len(), 2);
    assert_eq!(third.records()[1]["id"], 15);
    assert_eq!(pmm.run("pmm-metrics", &["--append"], "").records().len(), 1);
    assert_eq!(pmm.count(), 15);
    assert_eq!(pmm.run("pmm-verify", &[], "").code, 0);
}

#[test]
fn deterministic_metrics_are_byte_identical_across_runs() {
    let pmm = Pmm::new();
    pmm.seed(40);
    let a = pmm.run("pmm-metrics", &["--deterministic"], "");
    let b = pmm.run("pmm-metrics", &["--deterministic"], "");
    assert_eq!(a.code, 0, "{a:?}");
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(a.stdout.lines().count(), 1);
    let m = &a.records()[0];
    assert!(m.get("replay_ms_per_event").is_none());
    assert_eq!(m["event_count"], 40);
    assert_eq!(m["turns"], 10);
    let measured = pmm.run("pmm-metrics", &[], "");
    assert!(measured.records()[0]["replay_ms_per_event"].is_number());
}

#[test]
fn commitments_are_listed_by_cid() {
    let pmm = Pmm::new();
    let c = |kind: &str, cid: &str, extra: &str| {
        format!(
            "{{\"kind\":\"{kind}\",\"content\":\"{cid}\",\"meta\":{{\"cid\":\"{cid}\"{extra}}}}}\n"
        )
    };
    let input = [
        c("commitment_open", "c1", ""),
        c("commitment_open", "c2", ",\"origin\":\"autonomy_kernel\""),
        c("commitment_open", "c3", ""),
        c("commitment_close", "c1", ""),
        c("commitment_close", "zz", ""), // never opened: ignored
        c("commitment_open", "c4", ",\"origin\":\"autonomy_kernel\""),
        c("commitment_close", "c4", ""),
    ]
    .concat();
    assert_eq!(pmm.run("pmm-append", &[], &input).code, 0);
    let r = pmm.run("pmm-metrics", &["--deterministic"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let m = &r.records()[0];
    assert_eq!(m["open_commitments"], json!(["c2", "c3"]));
    assert_eq!(m["closed_commitments"], json!(["c1", "c4"]));
    assert_eq!(m["internal_goals_open"], 1);
}

#[test]
fn metrics_diag_prints_the_last_five_metrics_turns_oldest_first() {
    let pmm = Pmm::new();
    pmm.seed(40); // metrics_turn at 4, 8, ..., 40
    let r = pmm.run("pmm-metrics", &["--diag"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let ids: Vec<i64> = r
        .records()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [24, 28, 32, 36, 40]);
    assert!(r.records().iter().all(|e| e["kind"] == "metrics_turn"));
}

#[test]
fn every_program_has_help_version_and_completions() {
    let pmm = Pmm::new();
    for prog in PROGRAMS {
        let r = pmm.run(prog, &["--help"], "");
        assert_eq!(r.code, 0, "{prog}: {r:?}");
        for section in ["EXAMPLES:", "EXIT STATUS:", "ENVIRONMENT:", "PMM_DB"] {
            assert!(r.stdout.contains(section), "{prog} --help lacks {section}");
        }
        let r = pmm.run(prog, &["--version"], "");
        assert_eq!(r.code, 0, "{prog}: {r:?}");
        assert_eq!(
            r.stdout.trim(),
            format!("{prog} {}", env!("CARGO_PKG_VERSION"))
        );
        let r = pmm.run(prog, &["--completions", "bash"], "");
        assert_eq!(r.code, 0, "{prog}: {r:?}");
        assert!(
            r.stdout.contains("complete "),
            "{prog}: not a bash completion script"
        );
        assert!(
            r.stdout.contains(prog),
            "{prog}: the script does not name the program"
        );
        assert!(
            r.stdout.contains("--db"),
            "{prog}: completions know the flags"
        );
        assert!(!pmm.db.exists(), "{prog}: help and friends open no ledger");
        // A bad flag is a one-line usage error.
        let r = pmm.run(prog, &["--no-such-flag"], "");
        r.assert_error(prog, &["--no-such-flag"]);
    }
}

/// scripts/ci-verify.sh: the first run saves anchors, a grown ledger passes, a history
/// rewritten with recomputed hashes fails on the anchor.
#[test]
fn ci_verify_script_catches_a_rewritten_history() {
    let pmm = Pmm::new();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ci-verify.sh");
    let ci = |export: &std::path::Path| {
        std::process::Command::new("sh")
            .arg(&script)
            .arg(export)
            .env("PMM_VERIFY", assert_cmd::cargo::cargo_bin("pmm-verify"))
            .output()
            .unwrap()
    };
    let export = pmm.path("ledger.jsonl");
    pmm.seed(6);
    let r = pmm.run(
        "pmm-export",
        &["--format", "jsonl", "-o", export.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let out = ci(&export);
    assert!(out.status.success(), "{out:?}");
    let anchors = std::fs::read_to_string(pmm.path("anchors.txt")).unwrap();
    assert!(anchors.contains("\"last_id\":6"), "{anchors}");

    pmm.seed(2);
    pmm.run(
        "pmm-export",
        &["--format", "jsonl", "-o", export.to_str().unwrap()],
        "",
    );
    assert!(ci(&export).status.success());

    // Rewrite event 3 and recompute every hash after it: the chain alone verifies...
    let events = pmm.run("pmm-replay", &[], "").records();
    let mut lines = String::new();
    for mut e in events {
        if e["id"] == 3 {
            e["content"] = "forged".into();
        }
        lines.push_str(&format!("{e}\n"));
    }
    let forged = Pmm::new();
    assert_eq!(forged.run("pmm-append", &[], &lines).code, 0);
    forged.run(
        "pmm-export",
        &["--format", "jsonl", "-o", export.to_str().unwrap()],
        "",
    );
    let plain = pmm.run("pmm-verify", &[export.to_str().unwrap()], "");
    assert_eq!(
        plain.code, 0,
        "a consistent forgery verifies on its own: {plain:?}"
    );
    // ... but not against the anchors of the previous run, which are left as they were.
    let before = std::fs::read_to_string(pmm.path("anchors.txt")).unwrap();
    let out = ci(&export);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("anchor_mismatch"));
    assert_eq!(
        std::fs::read_to_string(pmm.path("anchors.txt")).unwrap(),
        before
    );
}

/// scripts/ci-verify.sh --signed: the last signed checkpoint instead of an anchors file. The
/// first run signs one, a grown ledger passes and gets a new one, a history rewritten with
/// recomputed hashes fails against it and leaves it as it was.
#[test]
fn ci_verify_script_keeps_the_last_signed_checkpoint() {
    let pmm = Pmm::new();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ci-verify.sh");
    let key = pmm.path("log.key");
    let r = pmm.run(
        "pmm-export",
        &["--keygen", "ci.test/log", "--key", key.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let vkey = r.stdout.trim().to_string();
    let ci = |ledger: &std::path::Path| {
        std::process::Command::new("sh")
            .arg(&script)
            .args(["--signed", key.to_str().unwrap(), &vkey])
            .arg(ledger)
            .arg(pmm.path("checkpoint.txt"))
            .env("PMM_VERIFY", assert_cmd::cargo::cargo_bin("pmm-verify"))
            .env("PMM_EXPORT", assert_cmd::cargo::cargo_bin("pmm-export"))
            .output()
            .unwrap()
    };
    pmm.seed(6);
    let out = ci(&pmm.db);
    assert!(out.status.success(), "{out:?}");
    let first = std::fs::read_to_string(pmm.path("checkpoint.txt")).unwrap();
    assert!(first.starts_with("ci.test/log\n6\n"), "{first}");

    pmm.seed(2);
    let out = ci(&pmm.db);
    assert!(out.status.success(), "{out:?}");
    let second = std::fs::read_to_string(pmm.path("checkpoint.txt")).unwrap();
    assert!(second.starts_with("ci.test/log\n8\n"), "{second}");

    // Event 3 rewritten and every hash after it recomputed, in a ledger of its own.
    let events = pmm.run("pmm-replay", &[], "").records();
    let mut lines = String::new();
    for mut e in events {
        if e["id"] == 3 {
            e["content"] = "forged".into();
        }
        lines.push_str(&format!("{e}\n"));
    }
    let forged = Pmm::new();
    assert_eq!(forged.run("pmm-append", &[], &lines).code, 0);
    assert_eq!(
        forged.run("pmm-verify", &[], "").code,
        0,
        "it verifies alone"
    );
    let out = ci(&forged.db);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("history was rewritten"));
    assert_eq!(
        std::fs::read_to_string(pmm.path("checkpoint.txt")).unwrap(),
        second
    );
    // Usage errors are exit 2.
    let out = std::process::Command::new("sh")
        .arg(&script)
        .args(["--signed", "k"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// An import into an empty ledger builds the hash index once, at the end (not one random
/// insert per event): the ledger has the reference's index afterwards.
#[test]
fn import_rebuilds_the_hash_index_it_deferred() {
    let src = Pmm::new();
    src.seed(20);
    let export = src.path("src.jsonl");
    let r = src.run(
        "pmm-export",
        &["--format", "jsonl", "-o", export.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let pmm = Pmm::new();
    let r = pmm.run("pmm-append", &["--import", export.to_str().unwrap()], "");
    assert_eq!(r.code, 0, "{r:?}");
    let c = rusqlite::Connection::open(&pmm.db).unwrap();
    let sql: String = c
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'idx_events_hash'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(sql, "CREATE UNIQUE INDEX idx_events_hash ON events(hash)");
    assert_eq!(pmm.run("pmm-verify", &["--integrity"], "").code, 0);
}
