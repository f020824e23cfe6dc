//! Bad input and unusable ledgers: a one-line `pmm-<tool>: error: ...` naming the problem (and
//! its line), exit 2, and nothing written for it.

use crate::harness::Pmm;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

const GOOD1: &str = r#"{"kind":"user_message","content":"one"}"#;
const GOOD2: &str = r#"{"kind":"assistant_message","content":"two","meta":{"role":"assistant"}}"#;
const AFTER: &str = r#"{"kind":"user_message","content":"never read"}"#;

/// Streams two good lines, `bad` as line 3 and a good line 4; checks the error names line 3
/// and every needle, that lines 1-2 were appended (and printed) and line 4 was not.
fn streaming_refuses_line_3(bad: &str, needles: &[&str]) {
    let pmm = Pmm::new();
    let input = format!("{GOOD1}\n{GOOD2}\n{bad}\n{AFTER}\n");
    let r = pmm.run("pmm-append", &[], &input);
    let mut all = vec!["<stdin>:3"];
    all.extend_from_slice(needles);
    r.assert_error("pmm-append", &all);
    let printed = r.records();
    assert_eq!(printed.len(), 2, "lines before the bad one stay: {r:?}");
    assert_eq!(printed[1]["content"], "two");
    assert_eq!(
        pmm.count(),
        2,
        "{bad:?} must not be written, nor anything after it"
    );
}

#[test]
fn non_json_line_is_refused_with_its_line() {
    streaming_refuses_line_3("this is not json", &["not valid JSON"]);
    streaming_refuses_line_3(
        r#"{"kind":"user_message","content":"x""#,
        &["not valid JSON"],
    );
    streaming_refuses_line_3(r#"["user_message","x"]"#, &["expected a JSON object"]);
}

#[test]
fn unknown_kind_is_refused() {
    streaming_refuses_line_3(
        r#"{"kind":"bogus","content":"x"}"#,
        &["unknown kind 'bogus'"],
    );
    streaming_refuses_line_3(r#"{"content":"x"}"#, &["missing \"kind\""]);
}

#[test]
fn non_string_content_is_refused() {
    streaming_refuses_line_3(
        r#"{"kind":"user_message","content":5}"#,
        &["\"content\" must be a string"],
    );
    streaming_refuses_line_3(
        r#"{"kind":"user_message","content":null}"#,
        &["\"content\" must be a string"],
    );
}

#[test]
fn non_object_meta_is_refused() {
    streaming_refuses_line_3(
        r#"{"kind":"user_message","content":"x","meta":[1,2]}"#,
        &["meta must be a JSON object", "array"],
    );
    streaming_refuses_line_3(
        r#"{"kind":"user_message","content":"x","meta":null}"#,
        &["meta must be a JSON object", "null"],
    );
}

#[test]
fn nan_and_infinity_are_refused() {
    streaming_refuses_line_3(
        r#"{"kind":"user_message","content":"x","meta":{"a":NaN}}"#,
        &["NaN"],
    );
    streaming_refuses_line_3(
        r#"{"kind":"user_message","content":"x","meta":{"a":Infinity}}"#,
        &["Infinity"],
    );
    streaming_refuses_line_3(
        r#"{"kind":"user_message","content":"x","meta":{"a":-Infinity}}"#,
        &["Infinity"],
    );
    // A literal that only overflows once parsed.
    streaming_refuses_line_3(
        r#"{"kind":"user_message","content":"x","meta":{"a":1e400}}"#,
        &["out of range"],
    );
}

#[test]
fn lone_surrogate_is_refused() {
    streaming_refuses_line_3(
        r#"{"kind":"user_message","content":"a\ud800b"}"#,
        &["surrogate"],
    );
    streaming_refuses_line_3(
        r#"{"kind":"user_message","content":"x","meta":{"k":"\udc00"}}"#,
        &["surrogate"],
    );
}

#[test]
fn empty_line_is_refused() {
    streaming_refuses_line_3("", &["empty line"]);
}

#[test]
fn bad_meta_option_writes_nothing_and_creates_no_file() {
    let pmm = Pmm::new();
    for (meta, needle) in [
        ("not json", "not valid JSON"),
        ("[1]", "meta must be a JSON object"),
        (r#"{"a":NaN}"#, "NaN"),
    ] {
        let r = pmm.run(
            "pmm-append",
            &["--kind", "user_message", "--content", "x", "--meta", meta],
            "",
        );
        r.assert_error("pmm-append", &["--meta", needle]);
        assert!(r.stdout.is_empty());
    }
    let r = pmm.run("pmm-append", &["--kind", "nope", "--content", "x"], "");
    r.assert_error("pmm-append", &["unknown kind 'nope'"]);
    assert!(!pmm.db.exists(), "refused before the ledger was opened");
}

#[test]
fn missing_ledger_is_an_error_for_every_reader_and_is_not_created() {
    let pmm = Pmm::new();
    let missing = pmm.path("nonexistent.db");
    let m = missing.to_str().unwrap();
    for (prog, args) in [
        ("pmm-verify", vec!["--db", m]),
        ("pmm-verify", vec![m]),
        ("pmm-export", vec!["--db", m]),
        ("pmm-export", vec!["--db", m, "-o", "out.json"]),
        ("pmm-metrics", vec!["--db", m]),
        ("pmm-metrics", vec!["--db", m, "--diag"]),
    ] {
        let r = pmm.run(prog, &args, "");
        r.assert_error(prog, &["nonexistent.db", "no such ledger"]);
        assert!(r.stdout.is_empty(), "{prog} {args:?}: {r:?}");
        assert!(!missing.exists(), "{prog} {args:?} created the ledger");
    }
    assert!(!pmm.path("out.json").exists());
    // The default path (no --db, no $PMM_DB) is not created either.
    for prog in ["pmm-verify", "pmm-export", "pmm-metrics"] {
        let out = pmm.cmd(prog).env_remove("PMM_DB").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{prog}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("no such ledger"));
        assert!(!pmm.path(".data").exists(), "{prog} created .data/");
    }
}

#[test]
fn read_only_ledger_is_refused_for_writers() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let before = std::fs::read(&pmm.db).unwrap();
    std::fs::set_permissions(&pmm.db, std::fs::Permissions::from_mode(0o444)).unwrap();
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "x"],
        "",
    );
    r.assert_error("pmm-append", &["read-only"]);
    let r = pmm.run("pmm-append", &[], &format!("{GOOD1}\n"));
    r.assert_error("pmm-append", &["read-only"]);
    let r = pmm.run("pmm-metrics", &["--append"], "");
    r.assert_error("pmm-metrics", &["read-only"]);
    assert_eq!(std::fs::read(&pmm.db).unwrap(), before, "the file changed");
    // Readers still read it.
    assert_eq!(pmm.count(), 2);
    std::fs::set_permissions(&pmm.db, std::fs::Permissions::from_mode(0o644)).unwrap();
}

#[test]
fn ledger_locked_past_the_busy_timeout_is_an_error_and_writes_nothing() {
    let pmm = Pmm::new();
    pmm.seed(3);
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    let r = pmm.run(
        "pmm-append",
        &[
            "--busy-timeout",
            "200",
            "--kind",
            "user_message",
            "--content",
            "x",
        ],
        "",
    );
    let waited = started.elapsed();
    r.assert_error("pmm-append", &["locked", "200 ms"]);
    // It gave up after its own timeout, not the 5 s default.
    assert!(waited < Duration::from_millis(4000), "{waited:?}");
    let r = pmm.run(
        "pmm-append",
        &["--busy-timeout", "200"],
        &format!("{GOOD1}\n"),
    );
    r.assert_error("pmm-append", &["locked", "<stdin>:1"]);
    let r = pmm.run(
        "pmm-append",
        &["--busy-timeout", "200", "--batch"],
        &format!("{GOOD1}\n"),
    );
    r.assert_error("pmm-append", &["locked"]);
    conn.execute_batch("ROLLBACK").unwrap();
    drop(conn);
    assert_eq!(pmm.count(), 3);
    let r = pmm.run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
}

/// A gzip export of a 40-event ledger, cut in the middle.
fn truncated_gzip(pmm: &Pmm, name: &str) -> std::path::PathBuf {
    pmm.seed(40);
    let full = pmm.path(&format!("full-{name}"));
    let r = pmm.run("pmm-export", &["-o", full.to_str().unwrap()], "");
    assert_eq!(r.code, 0, "{r:?}");
    let bytes = std::fs::read(&full).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b]);
    let cut = pmm.path(name);
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    cut
}

#[test]
fn truncated_gzip_is_an_error_for_verify_and_import() {
    for name in ["cut.jsonl.gz", "cut.json.gz"] {
        let pmm = Pmm::new();
        let cut = truncated_gzip(&pmm, name);
        let c = cut.to_str().unwrap();
        let r = pmm.run("pmm-verify", &[c], "");
        r.assert_error("pmm-verify", &[name, "truncated or corrupt gzip"]);
        let other = pmm.path("other.db");
        let r = pmm.run(
            "pmm-append",
            &["--db", other.to_str().unwrap(), "--import", c],
            "",
        );
        r.assert_error("pmm-append", &[name, "truncated or corrupt gzip"]);
        assert!(
            !other.exists(),
            "a failed import into a new ledger leaves no file"
        );
        // Into an existing ledger: nothing is written, the ledger stays.
        let before = pmm.count();
        assert!(before > 0);
        let db = pmm.db.to_str().unwrap();
        let r = pmm.run("pmm-append", &["--db", db, "--import", c], "");
        assert_eq!(r.code, 2, "{r:?}");
        assert_eq!(pmm.count(), before, "a failed import writes nothing");
    }
}

#[test]
fn bad_first_line_leaves_no_new_ledger_behind() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm-append", &[], "not json\n");
    r.assert_error("pmm-append", &["<stdin>:1"]);
    assert!(
        !pmm.db.exists(),
        "no ledger file for a run that wrote nothing"
    );
    let r = pmm.run(
        "pmm-append",
        &["--batch"],
        "{\"kind\":\"nope\",\"content\":\"\"}\n",
    );
    r.assert_error("pmm-append", &["<stdin>:1", "unknown kind"]);
    assert!(!pmm.db.exists());
}

#[test]
fn corrupt_gzip_is_an_error() {
    let pmm = Pmm::new();
    pmm.seed(40);
    let r = pmm.run("pmm-export", &["-o", "full.jsonl.gz"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let mut bytes = std::fs::read(pmm.path("full.jsonl.gz")).unwrap();
    let n = bytes.len();
    bytes[n - 6] ^= 0xff; // the CRC in the trailer
    std::fs::write(pmm.path("crc.jsonl.gz"), &bytes).unwrap();
    let r = pmm.run("pmm-verify", &["crc.jsonl.gz"], "");
    r.assert_error("pmm-verify", &["crc.jsonl.gz", "corrupt"]);
}

#[test]
fn non_ledger_files_are_an_error() {
    let pmm = Pmm::new();
    std::fs::write(pmm.path("notes.txt"), "hello world\nthis is not a ledger\n").unwrap();
    let no_events = pmm.path("other.db");
    {
        let c = rusqlite::Connection::open(&no_events).unwrap();
        c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
    }
    let other_before = std::fs::read(&no_events).unwrap();
    for file in ["notes.txt", "other.db"] {
        let path = pmm.path(file);
        let p = path.to_str().unwrap();
        for (prog, args) in [
            ("pmm-verify", vec![p]),
            ("pmm-verify", vec!["--db", p]),
            ("pmm-export", vec!["--db", p]),
            ("pmm-metrics", vec!["--db", p]),
            ("pmm-append", vec!["--db", p, "--kind", "user_message"]),
        ] {
            let r = pmm.run(prog, &args, "");
            r.assert_error(prog, &[file, "not a pmm ledger"]);
            assert!(r.stdout.is_empty(), "{prog} {args:?}: {r:?}");
        }
        // Importing it into a fresh ledger is refused and writes nothing.
        let r = pmm.run("pmm-append", &["--import", p], "");
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stderr.contains(file), "{r:?}");
        assert_eq!(pmm.count(), 0);
    }
    assert_eq!(
        std::fs::read(&no_events).unwrap(),
        other_before,
        "the file changed"
    );
    // Random text on stdin too.
    let r = pmm.run("pmm-verify", &["-"], "hello world\n");
    r.assert_error("pmm-verify", &["not a pmm ledger"]);
}

#[test]
fn export_range_the_wrong_way_round_is_an_error() {
    let pmm = Pmm::new();
    pmm.seed(6);
    let r = pmm.run("pmm-export", &["--since", "5", "--until", "2"], "");
    r.assert_error("pmm-export", &["--since 5 is after --until 2"]);
    assert!(r.stdout.is_empty());
    let r = pmm.run(
        "pmm-export",
        &["--since", "5", "--until", "2", "-o", "x.json"],
        "",
    );
    assert_eq!(r.code, 2);
    assert!(!pmm.path("x.json").exists());
}

#[test]
fn unknown_kind_in_export_is_an_error() {
    let pmm = Pmm::new();
    pmm.seed(6);
    let r = pmm.run(
        "pmm-export",
        &["--kind", "user_message", "--kind", "bogus"],
        "",
    );
    r.assert_error("pmm-export", &["--kind", "unknown kind 'bogus'"]);
    assert!(r.stdout.is_empty());
}

#[test]
fn unreadable_anchor_is_an_error() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let r = pmm.run("pmm-verify", &["--anchor", "3:abc"], "");
    assert_eq!(r.code, 2, "{r:?}");
    let mut f = std::fs::File::create(pmm.path("anchors.txt")).unwrap();
    writeln!(f, "# saved\n2:nothex").unwrap();
    let r = pmm.run("pmm-verify", &["--anchors-from", "anchors.txt"], "");
    r.assert_error("pmm-verify", &["anchors.txt:2"]);
}

/// A `.env` that exists but cannot be parsed or read is an error naming the file (and the
/// line), exit 2, with nothing of it applied: not a file that was never there.
#[test]
fn a_dotenv_that_cannot_be_parsed_or_read_is_named_not_ignored() {
    let pmm = Pmm::new();
    pmm.seed(2);
    std::fs::write(
        pmm.path(".env"),
        "# settings\nPMM_ADAPTER=dummy\nPMM_MODEL two words\nPMM_DB=elsewhere.db\n",
    )
    .unwrap();
    let r = pmm.run("pmm-metrics", &[], "");
    r.assert_error(
        "pmm-metrics",
        &[".env:3: ", "cannot parse 'PMM_MODEL two words'"],
    );
    assert!(r.stdout.is_empty(), "{r:?}");

    // A byte-order mark and a directory named .env are still fine.
    std::fs::write(pmm.path(".env"), "\u{feff}PMM_ADAPTER=dummy\n").unwrap();
    let r = pmm.run("pmm-metrics", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    std::fs::remove_file(pmm.path(".env")).unwrap();
    std::fs::create_dir(pmm.path(".env")).unwrap();
    let r = pmm.run("pmm-metrics", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    std::fs::remove_dir(pmm.path(".env")).unwrap();

    // There but unreadable (a link to itself: even root cannot open it).
    std::os::unix::fs::symlink(".env", pmm.path(".env")).unwrap();
    let r = pmm.run("pmm-metrics", &[], "");
    r.assert_error("pmm-metrics", &[".env: ", "symbolic links"]);
}
