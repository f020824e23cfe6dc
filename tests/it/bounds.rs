//! Issue 34's hostile-user sweep: files a flag names are read through one bounded reader
//! (`/dev/zero` as a key, checkpoint or proof is refused, not loaded until the kernel kills
//! the program), `--db` is a path to every program (a URL or an SQLite URI is refused, a
//! foreign SQLite file is left as it was), a closed pipe under a CSV export is a quiet
//! success, a proof checked against a bare root reports no trusted size, and `--every` has a
//! range.

use crate::harness::{Pmm, Run};
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Runs `name args` under a shell that caps its address space at 2 GiB (`ulimit -v`), with
/// stdin from `yes` when `yes` is set, killed after a minute: a program that reads a file
/// from elsewhere without bound dies of it (or is killed) instead of taking the machine with
/// it. Returns the exit code and stderr.
fn capped(pmm: &Pmm, yes: bool, name: &str, args: &[&str]) -> (i32, String) {
    let bin = assert_cmd::cargo::cargo_bin(name);
    let script = if yes {
        "ulimit -v 2097152 && yes | \"$@\""
    } else {
        "ulimit -v 2097152 && exec \"$@\" < /dev/null"
    };
    let template = pmm.std_cmd(name);
    let mut c = std::process::Command::new("sh");
    c.current_dir(pmm.dir.path());
    for (k, v) in template.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let mut child = c
        .args(["-c", script, "sh"])
        .arg(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return (status.code().unwrap_or(-1), err);
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{name} {args:?}: still reading after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts the refusal of an endless file: exit 2 and one line naming it and the limit.
fn refused(what: &str, (code, err): (i32, String), source: &str, limit: &str) {
    assert_eq!(code, 2, "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
    assert!(
        err.contains(&format!("{source}: larger than {limit} bytes")),
        "{what}: {err}"
    );
}

/// A ledger of 5 events, its signing key (`log.key`), verifier key and a checkpoint `cp.txt`.
fn signed(pmm: &Pmm) -> String {
    pmm.seed(5);
    let key = pmm.path("log.key");
    let r = pmm.run(
        "pmm-export",
        &["--keygen", "pmm.test/agent", "--key", key.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let vkey = r.stdout.trim().to_string();
    let r = pmm.run("pmm-export", &["--checkpoint", "--key", "log.key"], "");
    assert_eq!(r.code, 0, "{r:?}");
    std::fs::write(pmm.path("cp.txt"), &r.stdout).unwrap();
    vkey
}

#[test]
fn keys_checkpoints_and_proofs_from_dev_zero_are_refused_within_bounded_memory() {
    let pmm = Pmm::new();
    let vkey = signed(&pmm);
    let root = "0".repeat(64);
    let mib = "1048576";
    let zero = "/dev/zero";
    refused(
        "--check-proof /dev/zero",
        capped(
            &pmm,
            false,
            "pmm-verify",
            &["--check-proof", zero, "--root-hex", &root],
        ),
        zero,
        mib,
    );
    refused(
        "yes | --check-proof -",
        capped(
            &pmm,
            true,
            "pmm-verify",
            &["--check-proof", "-", "--root-hex", &root],
        ),
        "<stdin>",
        mib,
    );
    refused(
        "--checkpoint /dev/zero",
        capped(
            &pmm,
            false,
            "pmm-verify",
            &["--checkpoint", zero, "--key", &vkey],
        ),
        zero,
        mib,
    );
    refused(
        "--previous /dev/zero",
        capped(
            &pmm,
            false,
            "pmm-verify",
            &["--checkpoint", "cp.txt", "--key", &vkey, "--previous", zero],
        ),
        zero,
        mib,
    );
    refused(
        "--witness-key /dev/zero",
        capped(
            &pmm,
            false,
            "pmm-verify",
            &[
                "--checkpoint",
                "cp.txt",
                "--key",
                &vkey,
                "--cosign",
                "--witness-key",
                zero,
            ],
        ),
        zero,
        mib,
    );
    refused(
        "pmm-export --checkpoint --key /dev/zero",
        capped(&pmm, false, "pmm-export", &["--checkpoint", "--key", zero]),
        zero,
        mib,
    );
    refused(
        "pmm-tick --checkpoint-key /dev/zero",
        capped(
            &pmm,
            false,
            "pmm-tick",
            &["--checkpoint-key", zero, "--checkpoint-out", "out.txt"],
        ),
        zero,
        mib,
    );
    assert!(!pmm.path("out.txt").exists(), "nothing written");
    // The files that are real still work.
    let r = pmm.run(
        "pmm-verify",
        &["--checkpoint", "cp.txt", "--key", &vkey],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn a_file_of_endless_short_lines_is_refused_by_its_size() {
    // Every line is within --max-line; the whole file is not.
    let pmm = Pmm::new();
    pmm.seed(2);
    refused(
        "yes | --anchors-from /dev/stdin",
        capped(
            &pmm,
            true,
            "pmm-verify",
            &["--anchors-from", "/dev/stdin", "--max-line", "64K"],
        ),
        "/dev/stdin",
        "65536",
    );
}

#[test]
fn a_json_array_whose_event_never_ends_is_refused_by_its_size() {
    // `["` and then endless text: serde_json would hold the string in memory to its end.
    let pmm = Pmm::new();
    let long = pmm.path("long.json");
    let capped_with = |program: &str, args: &[&str]| {
        let bin = assert_cmd::cargo::cargo_bin(program);
        let out = std::process::Command::new("sh")
            .current_dir(pmm.dir.path())
            .env_remove("PMM_MAX_LINE")
            .env("PMM_DB", &pmm.db)
            .args([
                "-c",
                "ulimit -v 2097152 && (printf '[\"'; yes aaaaaaaa | tr -d '\\n') | \"$@\"",
                "sh",
            ])
            .arg(bin)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let too_long = "an event of the JSON array is longer than 65536 bytes";
    let (code, err) = capped_with("pmm-verify", &["-", "--max-line", "64K"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(too_long), "{err}");
    // An import reads through the same reader (a file here: an import opens its source more
    // than once).
    std::fs::write(&long, format!("[\"{}\"]", "a".repeat(100_000))).unwrap();
    let r = pmm.run(
        "pmm-append",
        &["--import", "long.json", "--max-line", "64K"],
        "",
    );
    r.assert_error("pmm-append", &["long.json", too_long]);
    assert!(!pmm.db.exists(), "no ledger from a refused import");
}

fn one(r: &Run) -> Value {
    let recs = r.records();
    assert_eq!(recs.len(), 1, "{r:?}");
    recs[0].clone()
}

#[test]
fn a_proof_checked_against_a_bare_root_reports_no_trusted_size() {
    let pmm = Pmm::new();
    let vkey = signed(&pmm);
    let r = pmm.run("pmm-verify", &["--prove", "3"], "");
    assert_eq!(r.code, 0, "{r:?}");
    std::fs::write(pmm.path("proof.json"), &r.stdout).unwrap();
    let root = one(&pmm.run("pmm-verify", &["--root"], ""))["root"]
        .as_str()
        .unwrap()
        .to_string();
    // Against the root: checked, but the size is the proof's own claim.
    let r = pmm.run(
        "pmm-verify",
        &["--check-proof", "proof.json", "--root-hex", &root],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let rec = one(&r);
    assert_eq!(
        (rec["ok"].clone(), rec["against"].clone()),
        (true.into(), "root".into())
    );
    assert!(rec.get("trusted_size").is_none(), "{rec}");
    // Against the signed checkpoint the size is signed, hence trusted.
    let r = pmm.run(
        "pmm-verify",
        &[
            "--check-proof",
            "proof.json",
            "--checkpoint",
            "cp.txt",
            "--key",
            &vkey,
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(one(&r)["trusted_size"], 5);
}

#[test]
fn a_closed_pipe_under_a_csv_export_is_a_quiet_success() {
    // Half a megabyte of export: more than a pipe holds, so the program is still writing
    // when the reader goes away.
    let pmm = Pmm::new();
    let big = "x".repeat(100_000);
    let lines: String = (0..5)
        .map(|_| format!("{{\"kind\":\"user_message\",\"content\":\"{big}\"}}\n"))
        .collect();
    assert_eq!(pmm.run("pmm-append", &[], &lines).code, 0);
    for format in ["csv", "jsonl", "md"] {
        let mut child = pmm
            .std_cmd("pmm-export")
            .args(["--format", format])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read one line, like `head -1`, and close the pipe.
        let mut out = child.stdout.take().unwrap();
        let mut first = [0u8; 16];
        std::io::Read::read_exact(&mut out, &mut first).unwrap();
        drop(out);
        let o = child.wait_with_output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{format}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.stderr.is_empty(), "{format}: {o:?}");
    }
}

#[test]
fn an_every_beyond_a_year_is_a_range_error_not_a_panic() {
    let pmm = Pmm::new();
    for every in ["99999999999999999999", "1e300", "400days", "31622401"] {
        let r = pmm.run("pmm-tick", &["--every", every], "");
        r.assert_error("pmm-tick", &["--every", "out of range"]);
        assert!(!pmm.db.exists(), "{every}: nothing created");
    }
}

/// The names in the workspace, sorted.
fn names(pmm: &Pmm) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(pmm.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_url_or_sqlite_uri_as_the_db_is_refused_by_every_program_and_creates_nothing() {
    let pmm = Pmm::new();
    let line = "{\"kind\":\"user_message\",\"content\":\"hi\"}\n";
    for db in [
        "file:x.db",
        "file:sub/x.db",
        "FILE:x.db?mode=memory",
        // A PostgreSQL URL is a ledger on a server (tests/it/pg.rs checks it is never taken
        // for a path either); every other scheme is refused.
        "mysql://user@host/pmm",
        "sqlite:///tmp/x.db",
    ] {
        for program in [
            "pmm-append",
            "pmm-replay",
            "pmm-verify",
            "pmm-export",
            "pmm-tick",
            "pmm-metrics",
            "pmm-graph",
            "pmm-recall",
        ] {
            let r = pmm.run(program, &["--db", db], line);
            r.assert_error(program, &[db, "not a file path"]);
        }
        // And from $PMM_DB the same.
        let r = pmm
            .cmd("pmm-append")
            .env("PMM_DB", db)
            .write_stdin(line)
            .output()
            .unwrap();
        assert_eq!(r.status.code(), Some(2), "{db}: {r:?}");
        assert_eq!(names(&pmm), Vec::<String>::new(), "{db}: nothing created");
    }
    // A file whose name starts with `file:` is named as a path, and is that file to writers
    // and readers alike.
    let r = pmm.run("pmm-append", &["--db", "./file:x.db"], line);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(names(&pmm)[0], "file:x.db");
    let r = pmm.run("pmm-replay", &["--db", "./file:x.db"], "");
    assert_eq!(r.records().len(), 1, "{r:?}");
    // `:memory:` is a file too, not a database that vanishes.
    let r = pmm.run("pmm-append", &["--db", ":memory:"], line);
    assert_eq!(r.code, 0, "{r:?}");
    let r = pmm.run("pmm-replay", &["--db", ":memory:"], "");
    assert_eq!(r.records().len(), 1, "{r:?}");
}

#[test]
fn a_foreign_sqlite_file_with_an_events_table_is_refused_untouched() {
    let pmm = Pmm::new();
    let db = pmm.path("other.db");
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch(
            "CREATE TABLE events (id INTEGER PRIMARY KEY, title TEXT, starts TEXT);
             INSERT INTO events (title, starts) VALUES ('dentist', '2025-01-02');",
        )
        .unwrap();
    }
    let before = std::fs::read(&db).unwrap();
    let line = "{\"kind\":\"user_message\",\"content\":\"hi\"}\n";
    for program in ["pmm-append", "pmm-replay", "pmm-verify", "pmm-tick"] {
        let r = pmm.run(program, &["--db", db.to_str().unwrap()], line);
        assert_eq!(r.code, 2, "{program}: {r:?}");
        assert!(r.stderr.contains("not a pmm ledger"), "{program}: {r:?}");
        assert_eq!(
            std::fs::read(&db).unwrap(),
            before,
            "{program} changed the file (its journal mode?)"
        );
        assert_eq!(names(&pmm), ["other.db"], "{program}");
    }
}
