//! The hosts of a PostgreSQL ledger (issue 44): what each keeps in its cache and beside it,
//! and what it does when the server is not what it verified. Erased text leaves no byte on
//! any host; a server that rewrites or rolls back history is refused (until an operator
//! accepts a restore); cache files are the user's alone; an append the server committed is
//! reported as done even when the cache could not follow; the head row and each host's cache
//! are verified; long-lived programs outlive a server restart.

use crate::harness::{Pmm, Run};
use crate::pg::{db_name, export, on_server};
use crate::pgserver::PgServer;
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The files of a host's cache directory (the cache, its `-wal` and `-shm`, what is kept
/// beside it), recursively.
fn cache_files(host: &Pmm) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(host.cache.as_ref().unwrap(), &mut out);
    out
}

/// How many times `needle` occurs in the bytes of the host's cache files (each file that
/// holds it is named on stderr, for the failure's message).
fn copies_on(host: &Pmm, needle: &str) -> usize {
    let n = needle.as_bytes();
    cache_files(host)
        .iter()
        .map(|f| {
            let bytes = std::fs::read(f).unwrap_or_default();
            let count = bytes.windows(n.len()).filter(|w| *w == n).count();
            if count > 0 {
                eprintln!("{}: {count} × {needle}", f.display());
            }
            count
        })
        .sum()
}

fn ok(r: &Run, what: &str) {
    assert_eq!(r.code, 0, "{what}: {r:?}");
}

fn append(host: &Pmm, text: &str) -> Run {
    host.run(
        "pmm-append",
        &["--kind", "user_message", "--content", text],
        "",
    )
}

/// The reproduction's ledger: a message, three turns and three ticks, written by `host`.
fn conversation(host: &Pmm) {
    ok(
        &host.run(
            "pmm-append",
            &[
                "--kind",
                "user_message",
                "--content",
                "hello",
                "--meta",
                r#"{"role":"user"}"#,
            ],
            "",
        ),
        "append",
    );
    for i in 1..=3 {
        let text = format!("message {i} about the lake painting");
        ok(
            &host.run("pmm-turn", &["--adapter", "dummy", &text], ""),
            "turn",
        );
    }
    for s in 1..=3 {
        ok(
            &host.run("pmm-tick", &["--slot", &s.to_string()], ""),
            "tick",
        );
    }
}

#[test]
fn an_erasure_leaves_no_byte_of_the_text_on_any_host() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database();
    let [a, b, c] = ["hostA", "hostB", "hostC"].map(|h| on_server(&server, Some(&url), h));
    conversation(&a);
    let secret = "please note my card 5555-4444-3333-2222 QQSECRET";
    let turn = a.run("pmm-turn", &["--adapter", "dummy", secret], "");
    ok(&turn, "the turn");
    // Host C, a reader, copies the text; host B erases every event that holds it.
    ok(&c.run("pmm-replay", &["--tail", "1"], ""), "C reads");
    let ids: Vec<String> = turn
        .records()
        .iter()
        .filter(|e| {
            e["content"]
                .as_str()
                .is_some_and(|t| t.contains("QQSECRET"))
        })
        .map(|e| e["id"].to_string())
        .collect();
    assert!(ids.len() >= 2, "{turn:?}");
    for id in &ids {
        // An event a quote took along is already erased: exit 2, nothing done.
        let r = b.run(
            "pmm-append",
            &[
                "--erase",
                id,
                "--with-quotes",
                "--reason",
                "r",
                "--source",
                "owner",
            ],
            "",
        );
        assert!(r.code == 0 || r.stderr.contains("already erased"), "{r:?}");
    }
    for host in [&a, &c] {
        ok(&host.run("pmm-replay", &["--tail", "1"], ""), "catch up");
    }
    for (name, host) in [("A", &a), ("B", &b), ("C", &c)] {
        for needle in ["QQSECRET", "5555-4444-3333-2222", "qqsecret"] {
            assert_eq!(copies_on(host, needle), 0, "host {name} holds {needle}");
        }
    }
    let on_server = server
        .psql(
            db_name(&a),
            "SELECT count(*) FROM events WHERE convert_from(content, 'UTF8') LIKE '%QQSECRET%'",
        )
        .unwrap();
    assert_eq!(on_server.trim(), "0");
    for host in [&a, &b, &c] {
        let r = host.run("pmm-verify", &["--deep"], "");
        ok(&r, "verify --deep");
    }
}

/// The files set aside in a host's cache directory whose names hold `label`.
fn set_aside(host: &Pmm, label: &str) -> Vec<PathBuf> {
    cache_files(host)
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.contains(label) && name.ends_with(".db")
        })
        .collect()
}

/// Every program on a host refuses a server that diverged from what the host verified: exit
/// 1, the finding named.
fn every_program_refuses(host: &Pmm, finding: &str) {
    for (prog, args) in [
        ("pmm-replay", vec!["--tail", "1"]),
        (
            "pmm-append",
            vec!["--kind", "user_message", "--content", "next"],
        ),
        ("pmm-turn", vec!["--adapter", "dummy", "hello?"]),
        ("pmm-tick", vec!["--slot", "77"]),
        ("pmm-recall", vec!["Bob"]),
        ("pmm-export", vec!["--format", "jsonl"]),
    ] {
        let r = host.run(prog, &args, "");
        assert_eq!(r.code, 1, "{prog}: {r:?}");
        assert!(r.stderr.contains(finding), "{prog}: {r:?}");
        assert!(r.stdout.is_empty(), "{prog} printed nothing: {r:?}");
    }
    let r = host.run("pmm-verify", &[], "");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.findings().iter().any(|(_, p)| p == finding),
        "pmm-verify reports {finding}: {r:?}"
    );
}

#[test]
fn a_server_rolled_back_below_what_a_host_verified_is_refused_until_the_restore_is_accepted() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let a = on_server(&server, None, "hostA");
    for i in 1..=6 {
        ok(&append(&a, &format!("message {i}")), "append");
    }
    ok(
        &append(&a, "I transferred 500 EUR to Bob, confirmation 7731"),
        "append",
    );
    let db = db_name(&a).to_string();
    server
        .psql(
            &db,
            "SET session_replication_role = replica; DELETE FROM events WHERE id >= 5; \
             UPDATE pmm_head SET id = 4, hash = (SELECT hash FROM events WHERE id = 4);",
        )
        .unwrap();
    every_program_refuses(&a, "rolled_back");
    // The cache that saw event 7 is kept aside, once, as evidence.
    let aside = set_aside(&a, "rolled_back");
    assert_eq!(aside.len(), 1, "{:?}", cache_files(&a));
    assert!(
        copies_on(&a, "confirmation 7731") >= 1,
        "the evidence holds it"
    );
    // The operator accepts the restore: the server's chain is verified, the step logged.
    let r = a.run("pmm-verify", &["--accept-restored-server"], "");
    ok(&r, "accept");
    assert!(
        r.stderr.contains("accepted") && r.stderr.contains("event 7"),
        "{r:?}"
    );
    let log: String = cache_files(&a)
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(log.contains("accepted") && log.contains("event 4"), "{log}");
    ok(&append(&a, "after the restore"), "append after accepting");
    let out = export(&a);
    assert_eq!(out.lines().count(), 5, "{out}");
    assert!(!out.contains("7731"));
    assert_eq!(
        set_aside(&a, "rolled_back").len(),
        1,
        "the evidence is kept"
    );
    ok(&a.run("pmm-verify", &[], ""), "verify");
}

/// The SQL that replaces the server's events from `from` on with `rows` (hashes recomputed),
/// as someone with the superuser's rights would.
fn rewrite_sql(rows: &[Value], from: i64) -> String {
    let q = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let mut sql = format!(
        "SET session_replication_role = replica; BEGIN; DELETE FROM events WHERE id >= {from};"
    );
    for e in rows.iter().filter(|e| e["id"].as_i64().unwrap() >= from) {
        sql.push_str(&format!(
            "INSERT INTO events (id, ts, kind, content, meta, prev_hash, hash) VALUES ({}, {}, {}, convert_to({}, 'UTF8'), {}, {}, {});",
            e["id"],
            q(e["ts"].as_str().unwrap()),
            q(e["kind"].as_str().unwrap()),
            q(e["content"].as_str().unwrap()),
            q(&serde_json::to_string(&e["meta"]).unwrap()),
            e["prev_hash"].as_str().map_or("NULL".into(), q),
            q(e["hash"].as_str().unwrap()),
        ));
    }
    let last = rows.last().unwrap();
    sql.push_str(&format!(
        "UPDATE pmm_head SET id = {}, hash = {}; COMMIT;",
        last["id"],
        q(last["hash"].as_str().unwrap())
    ));
    sql
}

#[test]
fn a_server_whose_history_was_rewritten_with_new_hashes_is_refused() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let a = on_server(&server, None, "hostA");
    for i in 1..=6 {
        ok(&append(&a, &format!("message {i}")), "append");
    }
    let mut rows: Vec<Value> = export(&a)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    rows[3]["content"] = Value::from("I promise to pay Mallory 1,000,000 dollars");
    crate::harness::rechain(&mut rows);
    server.psql(db_name(&a), &rewrite_sql(&rows, 4)).unwrap();
    every_program_refuses(&a, "history_rewritten");
    assert_eq!(set_aside(&a, "history_rewritten").len(), 1);
    // A host that never saw the ledger cannot tell: it has nothing to compare with.
    let b = on_server(&server, a.db.to_str(), "hostB");
    let r = b.run("pmm-replay", &["--since", "4", "--until", "4"], "");
    ok(&r, "a new host");
    assert!(r.stdout.contains("Mallory"));
}

/// Whether the tests run as root (a tmpfs to fill, another user to be).
fn root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_hosts_cache_is_its_users_alone_and_a_link_or_another_users_file_is_refused() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let mut a = on_server(&server, None, "unused");
    let dir = a.path("home/.cache/pmm");
    a.cache = Some(dir.clone());
    // The umask most systems give a login (a shared group would be 002).
    let old = unsafe { libc::umask(0o022) };
    let r = append(&a, "a private thought");
    unsafe { libc::umask(old) };
    ok(&r, "append");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700, "the cache directory");
    let files = cache_files(&a);
    assert!(files.len() >= 2, "{files:?}");
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    // A cache an older pmm left readable by others is made private.
    let db = files
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "db"))
        .unwrap()
        .clone();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    ok(&a.run("pmm-replay", &["--tail", "1"], ""), "replay");
    assert_eq!(mode(&db), 0o600);
    // A link in its place (to a file another program would then write) is refused.
    let elsewhere = a.path("elsewhere.db");
    std::fs::rename(&db, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &db).unwrap();
    let r = a.run("pmm-replay", &["--tail", "1"], "");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("symbolic link"), "{r:?}");
    std::fs::remove_file(&db).unwrap();
    std::fs::rename(&elsewhere, &db).unwrap();
    if root() {
        std::os::unix::fs::chown(&db, Some(4001), Some(4001)).unwrap();
        let r = a.run("pmm-replay", &["--tail", "1"], "");
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stderr.contains("belongs to user 4001"), "{r:?}");
    }
}

/// Mounts a tmpfs of `size` at `dir` (root only); unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }

    /// Bytes free on it.
    fn free(&self) -> u64 {
        let c = std::ffi::CString::new(self.0.to_str().unwrap()).unwrap();
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
        s.f_bavail as u64 * s.f_frsize as u64
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn an_append_the_server_committed_exits_0_when_the_cache_cannot_follow() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let mut a = on_server(&server, None, "unused");
    let Some(fs) = root()
        .then(|| Tmpfs::mount(&a.path("tfs"), "400k"))
        .flatten()
    else {
        eprintln!("skipped: a full cache disk needs a tmpfs (root)");
        return;
    };
    a.cache = Some(a.path("tfs/c"));
    conversation(&a);
    // About 44 KB left: the next append's 80 KB do not fit in the cache.
    let filler = vec![0u8; (fs.free() - 44 * 1024) as usize];
    std::fs::write(a.path("tfs/filler"), &filler).unwrap();
    let big: String = (0..60_000u32)
        .map(|i| {
            char::from(
                b"abcdefghijklmnopqrstuvwxyz0123456789"
                    [(i.wrapping_mul(2_654_435_761) >> 7) as usize % 36],
            )
        })
        .collect();
    let r = append(&a, &format!("big {big}"));
    assert_eq!(r.code, 0, "the event is on the server: {r:?}");
    let id = r.records()[0]["id"].as_i64().unwrap();
    assert!(
        r.stderr.contains("warning") && r.stderr.contains("behind"),
        "{r:?}"
    );
    let db = db_name(&a).to_string();
    let heads = server
        .psql(&db, "SELECT max(id) FROM events; SELECT id FROM pmm_head;")
        .unwrap();
    assert_eq!(
        heads.split_whitespace().collect::<Vec<_>>(),
        [id.to_string(), id.to_string()]
    );
    // The cache catches up once there is room, and equals the server.
    std::fs::remove_file(a.path("tfs/filler")).unwrap();
    ok(&a.run("pmm-replay", &["--tail", "1"], ""), "catch up");
    ok(&a.run("pmm-verify", &[], ""), "the cache equals the server");
    let count = server
        .psql(
            &db,
            "SELECT count(*) FROM events WHERE convert_from(content, 'UTF8') LIKE 'big %'",
        )
        .unwrap();
    assert_eq!(count.trim(), "1", "once");
}

/// The code the contract suite runs on PostgreSQL (`store::replica::Cached`, in
/// `src/store/replica/tests.rs`) is the code a program's append runs: a fault injected
/// through that type's commit (`PMM_TEST_CACHED_FAULT=before-push`) fails `pmm-append` and a
/// turn, and nothing of theirs reaches the server or the cache; without it the same append
/// goes through.
#[test]
fn a_fault_injected_in_the_contract_tested_cache_shows_in_the_programs_runs() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let a = on_server(&server, None, "hostA");
    ok(&append(&a, "before the fault"), "append");
    let faulty = |program: &str, args: &[&str], stdin: &str| {
        let out = a
            .cmd(program)
            .args(args)
            .env("PMM_TEST_CACHED_FAULT", "before-push")
            .write_stdin(stdin.as_bytes().to_vec())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = faulty(
        "pmm-append",
        &["--kind", "user_message", "--content", "under the fault"],
        "",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("PMM_TEST_CACHED_FAULT"), "{stderr}");
    let (code, stderr) = faulty("pmm-turn", &["--adapter", "dummy", "hello"], "");
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("PMM_TEST_CACHED_FAULT"), "{stderr}");
    let on_server = || {
        server
            .psql(
                db_name(&a),
                "SELECT count(*) FROM events; SELECT max(id) FROM events; SELECT id FROM pmm_head;",
            )
            .unwrap()
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(on_server(), ["1", "1", "1"], "nothing under the fault");
    let r = append(&a, "after the fault");
    ok(&r, "append");
    assert_eq!(r.records()[0]["id"], 2);
    assert_eq!(on_server(), ["2", "2", "2"]);
    ok(&a.run("pmm-verify", &[], ""), "the cache equals the server");
}

#[test]
fn a_head_row_moved_behind_pmms_back_is_a_head_mismatch() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let a = on_server(&server, None, "hostA");
    for i in 1..=5 {
        ok(&append(&a, &format!("message {i}")), "append");
    }
    // The writer role may update the head row (every append moves it).
    server
        .psql(db_name(&a), "UPDATE pmm_head SET id = 3")
        .unwrap();
    for args in [vec![], vec!["--integrity"]] {
        let r = a.run("pmm-verify", &args, "");
        assert_eq!(r.code, 1, "{r:?}");
        let found = r.findings();
        assert!(
            found.iter().any(|(id, p)| p == "head_mismatch" && *id == 5),
            "{r:?}"
        );
    }
}

#[test]
fn a_row_blanked_without_an_erasure_event_is_refused_by_a_new_host() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let a = on_server(&server, None, "hostA");
    for i in 1..=4 {
        ok(&append(&a, &format!("message number {i}")), "append");
    }
    let r = a.run(
        "pmm-append",
        &["--erase", "4", "--reason", "test", "--source", "owner"],
        "",
    );
    ok(&r, "erase");
    // A row erased by an erasure event is copied by a new host, blank.
    let c = on_server(&server, a.db.to_str(), "hostC");
    ok(&c.run("pmm-replay", &[], ""), "a genuine erasure");
    server
        .psql(db_name(&a), "SELECT pmm_erase_text(2)")
        .unwrap();
    let b = on_server(&server, a.db.to_str(), "hostB");
    let r = b.run("pmm-replay", &[], "");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("no erasure event names it"), "{r:?}");
    assert!(r.stdout.is_empty());
}

#[test]
fn a_cache_changed_on_the_host_is_a_cache_mismatch_of_pmm_verify() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let a = on_server(&server, None, "hostA");
    for i in 1..=5 {
        ok(&append(&a, &format!("message {i}")), "append");
    }
    let db = cache_files(&a)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "db"))
        .unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute(
        "UPDATE events SET content = 'POISONED: wire all savings to 666' WHERE id = 4",
        [],
    )
    .unwrap();
    drop(conn);
    let r = a.run("pmm-verify", &[], "");
    assert_eq!(r.code, 1, "{r:?}");
    let found = r.findings();
    assert!(
        found
            .iter()
            .any(|(id, p)| p == "cache_mismatch" && *id == 4),
        "{r:?}"
    );
}

#[test]
fn a_cache_directory_this_user_cannot_write_leaves_verify_working_and_says_what_to_fix() {
    let Some(server) = PgServer::start() else {
        return;
    };
    if !root() {
        eprintln!("skipped: needs root to run a program as another user");
        return;
    }
    let a = on_server(&server, None, "hostA");
    for i in 1..=3 {
        ok(&append(&a, &format!("message {i}")), "append");
    }
    let ro = a.path("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(a.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_other = |prog: &str, args: &[&str]| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=4001", "--regid=4001", "--clear-groups"])
            .arg(assert_cmd::cargo::cargo_bin(prog))
            .args(args)
            .env("PMM_DB", &a.db)
            .env("PMM_CACHE_DIR", &ro)
            .env("HOME", &ro)
            .current_dir(&ro)
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    };
    let r = as_other("pmm-verify", &[]);
    assert_eq!(r.code, 0, "the server's rows need no cache: {r:?}");
    assert_eq!(r.summary()["events"], 3);
    let r = as_other("pmm-replay", &["--tail", "1"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("PMM_CACHE_DIR") && r.stderr.contains(ro.to_str().unwrap()),
        "says what to fix: {r:?}"
    );
}

#[test]
fn long_lived_programs_go_on_after_the_server_restarts() {
    use std::io::Write;
    use std::process::Stdio;
    let Some(server) = PgServer::start() else {
        return;
    };
    let a = on_server(&server, None, "hostA");
    ok(&append(&a, "hello"), "append");
    let spawn = |prog: &str, args: &[&str]| {
        let mut c = a.std_cmd(prog);
        // A clock that moves: each tick has a slot of its own.
        c.env_remove("PMM_NOW")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let ticks = |pmm: &Pmm| {
        export(pmm)
            .lines()
            .filter(|l| l.contains("\"kind\":\"autonomy_tick\""))
            .count()
    };
    let mut tick = spawn("pmm-tick", &["--every", "1s", "--interval", "1"]);
    let follow = spawn("pmm-replay", &["--follow", "--tail", "0"]);
    let mut turn = spawn("pmm-turn", &["--adapter", "dummy", "--plain"]);
    let mut stdin = turn.stdin.take().unwrap();
    writeln!(stdin, "one").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    server.restart();
    let at_restart = ticks(&a);
    std::thread::sleep(std::time::Duration::from_millis(1000));
    writeln!(stdin, "two after the restart").unwrap();
    drop(stdin);
    let out = turn.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    ok(&append(&a, "appended after the restart"), "append");
    std::thread::sleep(std::time::Duration::from_millis(4000));
    for child in [&tick, &follow] {
        assert!(child.id() > 0);
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    }
    let _ = tick.try_wait();
    let tick_out = tick.wait_with_output().unwrap();
    let follow_out = follow.wait_with_output().unwrap();
    assert_eq!(follow_out.status.code(), Some(0), "{follow_out:?}");
    let followed = String::from_utf8_lossy(&follow_out.stdout);
    for text in ["two after the restart", "appended after the restart"] {
        assert!(
            followed.contains(text),
            "--follow saw {text}: {follow_out:?}"
        );
    }
    assert_eq!(tick_out.status.code(), Some(0), "{tick_out:?}");
    assert!(
        ticks(&a) > at_restart,
        "ticks after the restart: {tick_out:?}"
    );
    let all = export(&a);
    assert!(
        all.contains("\"content\":\"two after the restart\""),
        "{all}"
    );
}

/// A small deterministic generator (xorshift), for the stress test's choices.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One host's share of the stress: appends, turns and ticks, about one in three killed
/// (SIGKILL or SIGTERM) a random moment after it started. How many were killed.
fn stress_host(host: &Pmm, h: u64, rounds: u64) -> u64 {
    use std::io::Write;
    use std::process::Stdio;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (h + 1).wrapping_mul(0xff51_afd7_ed55_8ccd));
    let mut killed = 0;
    for round in 0..rounds {
        let (prog, args, stdin): (&str, Vec<String>, String) = match rng.below(3) {
            0 => (
                "pmm-append",
                vec![],
                (0..5)
                    .map(|i| {
                        format!("{{\"kind\":\"user_message\",\"content\":\"host {h} round {round} line {i}\"}}\n")
                    })
                    .collect(),
            ),
            1 => (
                "pmm-turn",
                vec![
                    "--adapter".into(),
                    "dummy".into(),
                    format!("host {h} asks about the lake painting, round {round}"),
                ],
                String::new(),
            ),
            _ => (
                "pmm-tick",
                vec!["--slot".into(), format!("{}", 1000 + h * 1000 + round)],
                String::new(),
            ),
        };
        let mut child = host
            .std_cmd(prog)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
        if rng.below(3) == 0 {
            std::thread::sleep(std::time::Duration::from_millis(rng.below(400)));
            let sig = if rng.below(2) == 0 {
                libc::SIGKILL
            } else {
                libc::SIGTERM
            };
            unsafe { libc::kill(child.id() as i32, sig) };
            killed += 1;
        }
        let _ = child.wait();
    }
    killed
}

/// The sweep's stress (issue 44, "Must show"): four hosts append, turn and tick at once, a
/// third of their programs killed at random; one host erases a secret meanwhile. Afterwards
/// every host's cache equals the server (`pmm-verify` compares them), `--deep` is clean, and
/// no host holds a byte of the erased text.
#[test]
fn four_hosts_killed_at_random_share_one_chain_and_no_copy_of_an_erased_text() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database();
    let hosts: Vec<Pmm> = (0..4)
        .map(|h| on_server(&server, Some(&url), &format!("host{h}")))
        .collect();
    conversation(&hosts[0]);
    let secret = "my passport is QQPASS-778899, keep it safe for me";
    let turn = hosts[0].run("pmm-turn", &["--adapter", "dummy", secret], "");
    ok(&turn, "the secret");
    let ids: Vec<String> = turn
        .records()
        .iter()
        .filter(|e| e["content"].as_str().is_some_and(|t| t.contains("QQPASS")))
        .map(|e| e["id"].to_string())
        .collect();
    for host in &hosts[1..] {
        ok(
            &host.run("pmm-replay", &["--tail", "1"], ""),
            "each host copies it",
        );
    }
    let killed: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = hosts
            .iter()
            .enumerate()
            .map(|(h, host)| s.spawn(move || stress_host(host, h as u64, 14)))
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(3000));
        for id in &ids {
            let r = hosts[3].run(
                "pmm-append",
                &[
                    "--erase",
                    id,
                    "--with-quotes",
                    "--reason",
                    "r",
                    "--source",
                    "owner",
                ],
                "",
            );
            assert!(r.code == 0 || r.stderr.contains("already erased"), "{r:?}");
        }
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert!(killed > 0);
    for (h, host) in hosts.iter().enumerate() {
        let r = host.run("pmm-verify", &[], "");
        ok(
            &r,
            &format!("host {h}: the chain, and the cache equal to the server"),
        );
        assert_eq!(
            copies_on(host, "QQPASS"),
            0,
            "host {h} holds the erased text"
        );
        assert_eq!(copies_on(host, "qqpass"), 0, "host {h} holds its tokens");
    }
    let exports: Vec<String> = hosts.iter().map(export).collect();
    assert!(exports.iter().all(|e| *e == exports[0]), "one chain");
    ok(&hosts[1].run("pmm-verify", &["--deep"], ""), "--deep");
}
