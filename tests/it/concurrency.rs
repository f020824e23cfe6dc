//! Many writers at once, a writer killed mid-batch, a batch with a bad line: the chain stays
//! one unbroken, verifiable chain, and a batch is all or nothing.

use crate::harness::Pmm;
use serde_json::Value;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A workspace on a memory file system when there is one: the per-line commits below fsync
/// 2,000 times, which costs seconds on a disk and proves nothing more.
fn fast_workspace() -> Pmm {
    let shm = std::path::Path::new("/dev/shm");
    match tempfile::tempdir_in(shm) {
        Ok(dir) => {
            let db = dir.path().join("ledger.db");
            Pmm {
                dir,
                db,
                cache: None,
            }
        }
        Err(_) => Pmm::new(),
    }
}

fn append_cmd(pmm: &Pmm, args: &[&str]) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("pmm-append"));
    c.args(args)
        .current_dir(pmm.dir.path())
        .env_remove("RUST_BACKTRACE")
        .env("PMM_DB", &pmm.db)
        .env("PMM_NOW", "2025-11-24T05:55:41.194157Z")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn contents(pmm: &Pmm) -> Vec<(i64, String)> {
    let r = pmm.run("pmm-export", &["--format", "jsonl"], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
        .iter()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn four_concurrent_streaming_appenders_form_one_unbroken_chain() {
    const WRITERS: usize = 4;
    const LINES: usize = 500;
    let pmm = fast_workspace();
    // Create the ledger first so that all four race on appends, not on creating the schema.
    assert_eq!(pmm.seed(0).len(), 0);
    let mut children = Vec::new();
    for w in 0..WRITERS {
        let mut child = append_cmd(&pmm, &[]).spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || {
            for i in 0..LINES {
                writeln!(
                    stdin,
                    r#"{{"kind":"user_message","content":"w{w}-{i}","meta":{{"writer":{w}}}}}"#
                )
                .unwrap();
            }
            // Dropping stdin closes the pipe: end of input.
        });
        // Drain stdout and stderr as they come, so that no writer ever waits on a full pipe.
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut out, mut err) = (String::new(), String::new());
            stdout.read_to_string(&mut out).unwrap();
            stderr.read_to_string(&mut err).unwrap();
            (out, err)
        });
        children.push((child, feeder, reader));
    }
    let mut printed = Vec::new();
    for (w, (mut child, feeder, reader)) in children.into_iter().enumerate() {
        feeder.join().unwrap();
        let (out, err) = reader.join().unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "writer {w}: {status:?} {err}");
        assert!(err.is_empty(), "writer {w}: {err}");
        let events: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(events.len(), LINES, "writer {w} printed");
        // Each writer's own events are in its input order.
        let ids: Vec<i64> = events.iter().map(|e| e["id"].as_i64().unwrap()).collect();
        assert!(ids.windows(2).all(|p| p[0] < p[1]), "writer {w}: {ids:?}");
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e["content"], format!("w{w}-{i}"));
        }
        printed.extend(events);
    }

    let total = (WRITERS * LINES) as u64;
    let r = pmm.run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.findings().is_empty());
    let s = r.summary();
    assert_eq!(s["events"], total);
    assert_eq!(s["first_id"], 1);
    assert_eq!(s["last_id"], total);
    assert_eq!(s["ok"], true);

    // Ids 1..=2000, each content exactly once, and what each writer printed is what is stored.
    let stored = contents(&pmm);
    let ids: Vec<i64> = stored.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=total as i64).collect::<Vec<_>>());
    let mut seen: Vec<&str> = stored.iter().map(|(_, c)| c.as_str()).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), total as usize);
    for e in &printed {
        let id = e["id"].as_i64().unwrap();
        assert_eq!(stored[id as usize - 1].1, e["content"].as_str().unwrap());
    }
}

#[test]
fn killed_batch_writes_nothing_and_leaves_the_ledger_clean() {
    let pmm = fast_workspace();
    let before = pmm.seed(5);
    assert_eq!(before.len(), 5);
    let mut child = append_cmd(&pmm, &["--batch"]).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for i in 0..300 {
        writeln!(stdin, r#"{{"kind":"user_message","content":"batch {i}"}}"#).unwrap();
    }
    stdin.flush().unwrap();
    // Give it time to read what it was given into its open transaction.
    std::thread::sleep(Duration::from_millis(300));
    // The batch holds the write lock now: it is mid-transaction, not waiting to start. (On a
    // slow machine it may need longer to get there; it must within a few seconds.)
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    conn.busy_timeout(Duration::from_millis(0)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the batch never took the write lock"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(conn);
    // SIGKILL on Unix: no chance to clean up. The input is still open (never ended).
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    drop(stdin);
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(
        out.is_empty(),
        "nothing was committed, so nothing is printed: {out}"
    );

    let r = pmm.run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.summary()["events"],
        5,
        "the killed batch must leave nothing"
    );
    assert_eq!(r.summary()["last_hash"], before[4]["hash"]);
    // And the ledger takes the next append where it left off.
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "after"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let e = &r.records()[0];
    assert_eq!(e["id"], 6);
    assert_eq!(e["prev_hash"], before[4]["hash"]);
    // The full-text index went with the killed transaction: it matches the ledger.
    let r = pmm.run("pmm-recall", &["--check"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let r = pmm.run("pmm-recall", &["--kind", "user_message", "quoted"], "");
    let ids: Vec<i64> = r
        .records()
        .iter()
        .filter_map(|e| e["id"].as_i64())
        .collect();
    assert!(!ids.is_empty() && ids.iter().all(|id| *id <= 6), "{r:?}");
}

#[test]
fn killed_import_leaves_the_index_matching_the_ledger() {
    let source = Pmm::new();
    source.seed(400);
    let export = source.run("pmm-export", &["--format", "jsonl"], "").stdout;
    let lines: Vec<&str> = export.lines().collect();
    assert_eq!(lines.len(), 400);
    let pmm = fast_workspace();
    pmm.seed(0);
    let mut child = append_cmd(&pmm, &["--import", "-"]).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in &lines[..300] {
        writeln!(stdin, "{l}").unwrap();
    }
    stdin.flush().unwrap();
    // Wait until the import holds the write lock (mid-transaction), then SIGKILL it.
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    conn.busy_timeout(Duration::from_millis(0)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the import never took the write lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(conn);
    child.kill().unwrap();
    assert!(!child.wait().unwrap().success());
    drop(stdin);
    if pmm.db.exists() {
        let r = pmm.run("pmm-recall", &["--check"], "");
        assert_eq!(r.code, 0, "{r:?}");
    }
    // The whole import then goes through, index included.
    let r = pmm.run("pmm-append", &["--import", "-"], &export);
    assert_eq!(r.code, 0, "{r:?}");
    let r = pmm.run("pmm-recall", &["--check"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        pmm.run("pmm-recall", &["--k", "1", "event 399"], "").code,
        0
    );
}

#[test]
fn bad_line_in_a_batch_writes_nothing_of_the_batch() {
    let pmm = Pmm::new();
    pmm.seed(3);
    let mut input = String::new();
    for i in 1..=10 {
        if i == 7 {
            input.push_str("{\"kind\":\"no_such_kind\",\"content\":\"x\"}\n");
        } else {
            input.push_str(&format!(
                "{{\"kind\":\"user_message\",\"content\":\"b{i}\"}}\n"
            ));
        }
    }
    let r = pmm.run("pmm-append", &["--batch"], &input);
    r.assert_error("pmm-append", &["<stdin>:7", "unknown kind 'no_such_kind'"]);
    assert!(
        r.stdout.is_empty(),
        "a rolled-back batch prints nothing: {r:?}"
    );
    assert_eq!(pmm.count(), 3);
    // The same input without --batch keeps lines 1-6.
    let r = pmm.run("pmm-append", &[], &input);
    r.assert_error("pmm-append", &["<stdin>:7"]);
    assert_eq!(r.records().len(), 6);
    assert_eq!(pmm.count(), 9);
    let r = pmm.run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
}

/// The files in `pmm`'s folder whose names start with `prefix`.
fn named(pmm: &Pmm, prefix: &str) -> Vec<String> {
    std::fs::read_dir(pmm.dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// Starts `pmm-append --import -` into the workspace's path (which holds no ledger), feeds
/// it `lines` and leaves its stdin open; returns once it builds the ledger in its temporary
/// file, `.ledger.db.import-PID`.
fn import_into_new_path(
    pmm: &Pmm,
    lines: &[&str],
) -> (std::process::Child, std::process::ChildStdin) {
    let mut child = append_cmd(pmm, &["--import", "-"]).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    stdin.flush().unwrap();
    let tmp = pmm.path(&format!(".ledger.db.import-{}", child.id()));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(&tmp).map_or(0, |m| m.len()) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the import never started its temporary file {}",
            tmp.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Give it time to read what it was given into its transaction.
    std::thread::sleep(Duration::from_millis(300));
    (child, stdin)
}

fn export_of(n: usize) -> String {
    let source = Pmm::new();
    source.seed(n);
    source.run("pmm-export", &["--format", "jsonl"], "").stdout
}

#[test]
fn killed_import_into_a_new_path_leaves_no_ledger_and_the_next_one_succeeds() {
    let export = export_of(400);
    let lines: Vec<&str> = export.lines().collect();
    let pmm = fast_workspace();
    let (mut child, stdin) = import_into_new_path(&pmm, &lines[..300]);
    child.kill().unwrap();
    assert!(!child.wait().unwrap().success());
    drop(stdin);
    assert!(
        !pmm.db.exists(),
        "a killed import must leave no ledger at its path"
    );
    // What it leaves is its temporary file, which no reader takes for a ledger.
    assert_eq!(named(&pmm, ".ledger.db.import-").len(), 1);
    assert_eq!(pmm.run("pmm-verify", &[], "").code, 2);
    // The next import into that path succeeds, and removes the killed import's file.
    let r = pmm.run("pmm-append", &["--import", "-"], &export);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["events"], 400);
    assert_eq!(named(&pmm, ".ledger.db.import-"), Vec::<String>::new());
    let r = pmm.run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.summary()["events"], 400);
    let r = pmm.run("pmm-recall", &["--check"], "");
    assert_eq!(r.code, 0, "{r:?}");
    // An ordinary WAL ledger: the next writer appends to it.
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "after"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["id"], 401);
}

#[test]
fn an_import_never_overwrites_a_ledger_that_appears_at_its_path() {
    let export = export_of(50);
    let lines: Vec<&str> = export.lines().collect();
    let pmm = fast_workspace();
    let (child, stdin) = import_into_new_path(&pmm, &lines);
    // Another writer creates a ledger at the path while the import runs.
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "mine"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.trim_end().lines().count() == 1
            && err.starts_with("pmm-append: error: import refused: ")
            && err.contains("appeared"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // The other writer's ledger is as it left it, and the import left nothing behind.
    assert_eq!(contents(&pmm), vec![(1, "mine".to_string())]);
    assert_eq!(named(&pmm, ".ledger.db.import-"), Vec::<String>::new());
}

/// Issue 44, N0: four writers that create a ledger together, with a wait so short that some
/// time out while the ledger is being made. A writer that fails must never remove a file
/// another writer opened: every event a writer printed is on the ledger afterwards (an exit 0
/// means all of its lines are), and the chain verifies.
#[test]
fn writers_that_create_a_ledger_together_lose_nothing() {
    const WRITERS: usize = 4;
    const LINES: usize = 50;
    for round in 0..12 {
        let pmm = fast_workspace();
        let mut children = Vec::new();
        for w in 0..WRITERS {
            let mut child = append_cmd(&pmm, &["--busy-timeout", "1"]).spawn().unwrap();
            let mut stdin = child.stdin.take().unwrap();
            let input: String = (0..LINES)
                .map(|i| format!("{{\"kind\":\"user_message\",\"content\":\"w{w}-{i}\"}}\n"))
                .collect();
            let feeder = std::thread::spawn(move || {
                // A writer that failed early closes its stdin: not this test's concern.
                let _ = stdin.write_all(input.as_bytes());
            });
            children.push((child, feeder));
        }
        let mut printed: Vec<String> = Vec::new();
        let mut succeeded = 0;
        for (w, (child, feeder)) in children.into_iter().enumerate() {
            feeder.join().unwrap();
            let out = child.wait_with_output().unwrap();
            let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            if out.status.success() {
                succeeded += 1;
                assert_eq!(lines.len(), LINES, "round {round}, writer {w} exited 0");
            } else {
                let err = String::from_utf8_lossy(&out.stderr);
                assert_eq!(
                    out.status.code(),
                    Some(2),
                    "round {round}, writer {w}: {err}"
                );
            }
            printed.extend(
                lines
                    .iter()
                    .map(|e| e["content"].as_str().unwrap().to_string()),
            );
        }
        if printed.is_empty() {
            continue;
        }
        assert!(
            pmm.db.exists(),
            "round {round}: {succeeded} writers exited 0, {} events printed, and no ledger",
            printed.len()
        );
        let stored: Vec<String> = contents(&pmm).into_iter().map(|(_, c)| c).collect();
        for c in &printed {
            assert!(
                stored.contains(c),
                "round {round}: {c} was printed but is not on the ledger"
            );
        }
        let r = pmm.run("pmm-verify", &[], "");
        assert_eq!(r.code, 0, "round {round}: {r:?}");
    }
}
