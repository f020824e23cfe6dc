//! Issue 44, N1: a PostgreSQL password is `***` in every output, message and record — the
//! verify summary (a file people keep as anchors), errors about the URL however the password
//! is written, pmm-mcp's start-up line and its `verify` tool (which a read token reaches), and
//! the reply of a `cmd` adapter whose program prints its environment.

use crate::harness::{Pmm, Run};
use crate::pgserver::PgServer;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::Stdio;

const SECRET: &str = "S3CRET-PW";

/// `url` (the server's trusting superuser URL) with `password` in its user part.
fn with_password(url: &str, password: &str) -> String {
    url.replacen("postgres@", &format!("postgres:{password}@"), 1)
}

fn assert_hidden(what: &str, r: &Run) {
    for secret in [SECRET, "S3CRET-A", "S3CRET-PG"] {
        assert!(
            !r.stdout.contains(secret) && !r.stderr.contains(secret),
            "{what} shows {secret}: {r:?}"
        );
    }
}

fn workspace(url: &str) -> Pmm {
    let mut pmm = Pmm::new();
    pmm.db = PathBuf::from(url);
    pmm.cache = Some(pmm.path("cache"));
    pmm
}

#[test]
fn a_postgres_password_is_never_shown() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let plain = server.database();
    let url = with_password(&plain, SECRET);
    let pmm = workspace(&url);
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "hi"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_hidden("pmm-append", &r);

    // The verify summary, by --db and by PMM_DB (the harness sets PMM_DB).
    let r = pmm.run("pmm-verify", &["--db", &url], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_hidden("pmm-verify --db", &r);
    let source = r.summary()["source"].as_str().unwrap().to_string();
    assert!(source.contains("postgres:***@"), "{source}");
    let r = pmm.run("pmm-verify", &[], "");
    assert_hidden("pmm-verify with PMM_DB", &r);

    // Errors about the URL, however the password is written.
    let q = if url.contains('?') { '&' } else { '?' };
    let pass_param = format!("{}{q}pass%77ord=S3CRET-A&bogus=1", plain);
    let slash = with_password(&plain, "pa/S3CRET-PW");
    for bad in [format!("{url}{q}bogus=1"), pass_param, slash] {
        let r = pmm.run("pmm-replay", &["--db", &bad, "--tail", "1"], "");
        assert_eq!(r.code, 2, "{bad}: {r:?}");
        assert_hidden(&format!("pmm-replay --db {bad}"), &r);
        assert!(!r.stderr.contains("'pa'"), "{r:?}");
    }

    // A cmd adapter's program that prints its environment: PMM_DB with the password is not
    // inherited, PGPASSWORD neither, and what it prints is scrubbed of both anyway.
    let r = pmm
        .cmd("pmm-turn")
        .env("PGPASSWORD", "S3CRET-PG")
        .args([
            "--adapter",
            "cmd",
            "--command",
            "cat >/dev/null; echo \"db is $PMM_DB pg $PGPASSWORD\"",
            "hi",
        ])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0), "{r:?}");
    let r = pmm.run("pmm-replay", &["--kind", "assistant_message"], "");
    assert_hidden("the cmd adapter's reply", &r);
    assert!(r.stdout.contains("db is "), "{r:?}");

    // pmm-mcp: its start-up line and its verify tool.
    let mut child = pmm
        .std_cmd("pmm-mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"verify","arguments":{}}}"#,
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut replies = String::new();
    for _ in 0..2 {
        out.read_line(&mut replies).unwrap();
    }
    drop(stdin);
    let done = child.wait_with_output().unwrap();
    let r = Run {
        code: done.status.code().unwrap_or(-1),
        stdout: replies,
        stderr: String::from_utf8_lossy(&done.stderr).into_owned(),
    };
    assert!(r.stdout.contains("\"id\":1"), "{r:?}");
    assert!(r.stdout.contains("postgres:***@"), "{r:?}");
    assert!(
        r.stderr.contains("serving postgres://postgres:***@"),
        "{r:?}"
    );
    assert_hidden("pmm-mcp", &r);
}
