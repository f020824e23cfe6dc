//! Hostile input and hostile surroundings (issue 13): output files that are the ledger, a
//! closed stdout under a writer, empty inputs and anchor files, endless lines, a reader's
//! read-only leftovers, devices as ledgers.

use crate::harness::Pmm;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The program as a plain `std::process::Command` with the harness's environment (for
/// stdin from a device and for pipes the test holds open).
fn std_cmd(pmm: &Pmm, name: &str) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin(name));
    c.current_dir(pmm.dir.path())
        .env_remove("RUST_BACKTRACE")
        .env_remove("PMM_MAX_LINE")
        .env_remove("PMM_ADAPTER")
        .env_remove("PMM_MODEL")
        .env("PMM_DB", &pmm.db)
        .env("PMM_NOW", "2025-11-24T05:55:41.194157Z");
    c
}

/// Runs `c` with stdin from `/dev/zero`, killed after a minute (an unbounded reader would
/// run until memory runs out); returns exit code and stderr.
fn with_dev_zero(mut c: Command) -> (i32, String) {
    let mut child = c
        .stdin(Stdio::from(std::fs::File::open("/dev/zero").unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return (status.code().unwrap_or(-1), err);
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("still reading /dev/zero after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_verifies(pmm: &Pmm, events: u64) {
    let r = pmm.run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.summary()["events"], events, "{r:?}");
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn chat_export_onto_the_ledger_is_refused() {
    let pmm = Pmm::new();
    pmm.seed(3);
    let size = std::fs::metadata(&pmm.db).unwrap().len();
    let db = pmm.db.to_str().unwrap();
    let stdin = format!(
        "/export ledger.db\n/export ./ledger.db-wal\n/export {db}-shm\n/export out.jsonl\n/exit\n"
    );
    let r = pmm.run("pmm-turn", &["--chat", "--adapter", "dummy"], &stdin);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stderr.matches("refusing to write over").count(),
        3,
        "{r:?}"
    );
    assert!(std::fs::metadata(&pmm.db).unwrap().len() >= size);
    assert_verifies(&pmm, 3);
    // An ordinary file is still written, whole.
    let out = std::fs::read_to_string(pmm.path("out.jsonl")).unwrap();
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(r.stdout.contains("3 events written to out.jsonl"), "{r:?}");
}

#[test]
fn export_onto_the_ledger_or_its_files_is_refused() {
    let pmm = Pmm::new();
    pmm.seed(4);
    std::os::unix::fs::symlink(&pmm.db, pmm.path("link.db")).unwrap();
    std::fs::hard_link(&pmm.db, pmm.path("hard.db")).unwrap();
    std::fs::create_dir(pmm.path("sub")).unwrap();
    let db = pmm.db.to_str().unwrap().to_string();
    for target in [
        "ledger.db",
        "./ledger.db",
        "sub/../ledger.db",
        &db,
        "ledger.db-wal",
        "ledger.db-shm",
        "ledger.db-journal",
        "link.db",
        "hard.db",
    ] {
        let r = pmm.run("pmm-export", &["-o", target], "");
        r.assert_error("pmm-export", &[target, "refusing to write over"]);
        assert_verifies(&pmm, 4);
    }
    // The ledger named through a symlink is recognized too.
    let r = pmm.run("pmm-export", &["--db", "link.db", "-o", "ledger.db"], "");
    r.assert_error("pmm-export", &["refusing to write over"]);
    assert!(!pmm.path("ledger.db-journal").exists());
    assert_verifies(&pmm, 4);

    // Any other file: written beside the target and renamed in, keeping an existing mode.
    std::fs::write(pmm.path("old.jsonl"), "old\n").unwrap();
    std::fs::set_permissions(
        pmm.path("old.jsonl"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    let r = pmm.run("pmm-export", &["-o", "old.jsonl"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(mode(&pmm.path("old.jsonl")), 0o640);
    let text = std::fs::read_to_string(pmm.path("old.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 4);
    // A failed export leaves the old file as it was, and no temporary file.
    let r = pmm.run("pmm-export", &["--db", "missing.db", "-o", "old.jsonl"], "");
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(pmm.path("old.jsonl")).unwrap(),
        text
    );
    let names: Vec<String> = std::fs::read_dir(pmm.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.ends_with(".tmp")),
        "temporary files left: {names:?}"
    );
}

/// Starts `cmd` with piped stdin and stdout, writes `first`, reads one line of output, closes
/// stdout (as `| head -1` does), writes `rest` and waits.
fn close_stdout_midway(mut cmd: Command, first: &str, rest: &str) -> (i32, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(first.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with('{'), "{line:?}");
    drop(out);
    // The writer may only notice the closed pipe at its next print; stdin stays ours to fill.
    stdin.write_all(rest.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn closed_stdout_does_not_drop_input() {
    let pmm = Pmm::new();
    let line = |i: usize| format!("{{\"kind\":\"user_message\",\"content\":\"{i}\"}}\n");
    let rest: String = (2..=1000).map(line).collect();
    let (code, err) = close_stdout_midway(std_cmd(&pmm, "pmm-append"), &line(1), &rest);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err, "");
    assert_verifies(&pmm, 1000);

    // pmm-turn reading messages from stdin: every line is a turn.
    let turns = Pmm::new();
    let mut c = std_cmd(&turns, "pmm-turn");
    c.args(["--plain", "--adapter", "dummy"]);
    let rest: String = (2..=20).map(|i| format!("message {i}\n")).collect();
    let (code, err) = close_stdout_midway(c, "message 1\n", &rest);
    assert_eq!(code, 0, "{err}");
    let r = turns.run("pmm-replay", &["--kind", "user_message"], "");
    assert_eq!(r.records().len(), 20, "{r:?}");
}

#[test]
fn empty_input_is_not_a_clean_verify() {
    let pmm = Pmm::new();
    std::fs::write(pmm.path("z.json.gz"), "").unwrap();
    std::fs::write(pmm.path("e.jsonl"), "\n\n").unwrap();
    for file in ["z.json.gz", "e.jsonl"] {
        let r = pmm.run("pmm-verify", &[file], "");
        assert_eq!(r.code, 1, "{r:?}");
        assert_eq!(
            r.findings(),
            vec![(serde_json::Value::Null, "empty".into())]
        );
        assert_eq!(r.summary()["ok"], false);
        let r = pmm.run("pmm-verify", &[file, "--allow-empty"], "");
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.summary()["ok"], true);
    }
    // A 0-byte ledger (what a truncating /export left behind) does not verify either.
    std::fs::write(&pmm.db, "").unwrap();
    let r = pmm.run("pmm-verify", &[], "");
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.summary()["empty"], 1);
    // Nor does empty stdin.
    let r = pmm.run("pmm-verify", &["-"], "");
    assert_eq!(r.code, 1, "{r:?}");
    // A ledger with events is unaffected: no `empty` key in its summary.
    let full = Pmm::new();
    full.seed(2);
    let r = full.run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.summary().get("empty").is_none());
}

#[test]
fn anchors_file_without_anchors_is_refused() {
    let pmm = Pmm::new();
    pmm.seed(3);
    let events = pmm.run("pmm-replay", &[], "").stdout;
    let empty_summary = r#"{"type":"summary","events":0,"last_id":null,"last_hash":null}"#;
    for (name, text) in [
        ("empty.txt", ""),
        ("object.txt", "{}\n"),
        ("comments.txt", "# saved anchors\n\n# none yet\n"),
        ("events.jsonl", events.as_str()),
        ("empty-summary.txt", empty_summary),
    ] {
        std::fs::write(pmm.path(name), text).unwrap();
        let r = pmm.run("pmm-verify", &["--anchors-from", name], "");
        r.assert_error("pmm-verify", &[name, "no anchors"]);
    }
    // A saved summary still anchors.
    let saved = pmm.run("pmm-verify", &[], "").stdout;
    std::fs::write(pmm.path("anchors.txt"), saved.lines().last().unwrap()).unwrap();
    let r = pmm.run("pmm-verify", &["--anchors-from", "anchors.txt"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.summary()["anchors_checked"], 1);
}

#[test]
fn over_long_lines_are_bad_input() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let too_long = "line longer than 1000 bytes";

    let mut c = std_cmd(&pmm, "pmm-append");
    c.args(["--max-line", "1000"]);
    let (code, err) = with_dev_zero(c);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("<stdin>:1: ") && err.contains(too_long),
        "{err}"
    );

    let mut c = std_cmd(&pmm, "pmm-verify");
    c.args(["--anchors-from", "/dev/zero"])
        .env("PMM_MAX_LINE", "1000");
    let (code, err) = with_dev_zero(c);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("/dev/zero:1: ") && err.contains(too_long),
        "{err}"
    );

    let mut c = std_cmd(&pmm, "pmm-turn");
    c.args(["--plain", "--adapter", "dummy", "--max-line", "1000"]);
    let (code, err) = with_dev_zero(c);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(too_long), "{err}");

    let mut c = std_cmd(&pmm, "pmm-turn");
    c.args(["--chat", "--adapter", "dummy", "--max-line", "1000"]);
    let (code, err) = with_dev_zero(c);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(too_long), "{err}");

    let mut c = std_cmd(&pmm, "pmm-verify");
    c.arg("-").env("PMM_MAX_LINE", "1000");
    let (code, err) = with_dev_zero(c);
    // /dev/zero is not JSON at all; it is refused before any line is read.
    assert_eq!(code, 2, "{err}");

    // A .env linked to /dev/zero.
    let envdir = Pmm::new();
    envdir.seed(1);
    std::os::unix::fs::symlink("/dev/zero", envdir.path(".env")).unwrap();
    let mut c = std_cmd(&envdir, "pmm-metrics");
    c.env("PMM_MAX_LINE", "1000");
    let (code, err) = with_dev_zero(c);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(".env:1: ") && err.contains(too_long), "{err}");

    // An over-long line in a JSON Lines file: named with its line, exit 2 (not a finding).
    let mut jsonl = pmm.run("pmm-replay", &[], "").stdout;
    jsonl.push_str(&format!("{{\"x\":\"{}\"}}\n", "a".repeat(2000)));
    std::fs::write(pmm.path("long.jsonl"), &jsonl).unwrap();
    let r = pmm.run("pmm-verify", &["long.jsonl", "--max-line", "1000"], "");
    r.assert_error("pmm-verify", &["long.jsonl:3: ", too_long]);
    let r = pmm.run("pmm-verify", &["long.jsonl", "--max-line", "4K"], "");
    assert_eq!(
        r.code, 1,
        "a line within the limit is read (and is malformed): {r:?}"
    );

    // Lines within the limit are appended; the limit itself is checked.
    let line = r#"{"kind":"user_message","content":"short"}"#;
    let r = pmm.run("pmm-append", &["--max-line", "100"], &format!("{line}\n"));
    assert_eq!(r.code, 0, "{r:?}");
    let r = pmm.run("pmm-append", &["--max-line", "0"], "");
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn leftover_read_only_shm_does_not_block_writers() {
    // Root may write a read-only -shm, so the scenario runs as an ordinary user: as `nobody`
    // through setpriv when the tests run as root.
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    let prefix: Vec<&str> = if root {
        vec![
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]
    } else {
        vec![]
    };
    let pmm = Pmm::new();
    if root {
        let ok = Command::new("setpriv")
            .args(&prefix[1..])
            .arg(assert_cmd::cargo::cargo_bin("pmm-append"))
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !crate::harness::present_or_skip(
            ok,
            "setpriv (util-linux) and programs that user nobody may run",
            "the read-only -shm test as root",
        ) {
            return;
        }
        std::os::unix::fs::chown(pmm.dir.path(), Some(65534), Some(65534)).unwrap();
    }
    let run = |name: &str, args: &[&str]| {
        let mut c = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(assert_cmd::cargo::cargo_bin(name));
                c
            }
            None => Command::new(assert_cmd::cargo::cargo_bin(name)),
        };
        let out = c
            .args(args)
            .current_dir(pmm.dir.path())
            .env_remove("RUST_BACKTRACE")
            .env("PMM_DB", &pmm.db)
            .env("HOME", pmm.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run("pmm-append", &["--kind", "user_message", "--content", "a"]);
    assert_eq!(code, 0, "{err}");
    let chmod = |m: u32| {
        std::fs::set_permissions(&pmm.db, std::fs::Permissions::from_mode(m)).unwrap();
    };
    chmod(0o444);
    let (code, err) = run("pmm-replay", &[]);
    assert_eq!(code, 0, "{err}");
    let shm = pmm.path("ledger.db-shm");
    if shm.exists() {
        assert_eq!(mode(&shm) & 0o200, 0, "the reader left a read-only -shm");
    }
    chmod(0o644);
    let (code, err) = run("pmm-append", &["--kind", "user_message", "--content", "b"]);
    assert_eq!(code, 0, "the writer recovers from the leftover: {err}");
    let (code, err) = run("pmm-verify", &[]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_device_as_the_ledger_is_refused() {
    let pmm = Pmm::new();
    std::os::unix::fs::symlink("/dev/null", &pmm.db).unwrap();
    let journal_before = Path::new("/dev/null-journal").exists();
    for (prog, args) in [
        (
            "pmm-append",
            &["--kind", "user_message", "--content", "x"][..],
        ),
        ("pmm-turn", &["--adapter", "dummy", "hello"][..]),
        ("pmm-tick", &[][..]),
        ("pmm-replay", &[][..]),
        ("pmm-verify", &[][..]),
        ("pmm-export", &[][..]),
        ("pmm-metrics", &[][..]),
    ] {
        let r = pmm.run(prog, args, "");
        r.assert_error(prog, &["ledger.db", "not a regular file"]);
    }
    if !journal_before {
        assert!(!Path::new("/dev/null-journal").exists());
    }
}
