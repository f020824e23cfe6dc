//! PostgreSQL ledgers (issue 35): every program on a `postgres://` URL, against a throwaway
//! server started from Debian's binaries (`pgserver.rs`), compared byte for byte with the same
//! work on a SQLite file; several "hosts" (workspaces with their own cache directories) on one
//! chain; rows changed behind pmm's back; caches that no longer match; a URL never taken for a
//! file path.

use crate::harness::Pmm;
use crate::pgserver::PgServer;
use serde_json::Value;
use std::path::PathBuf;

#[test]
fn a_postgres_url_is_never_taken_for_a_file_path() {
    // Nothing listens on port 1: every program says it cannot connect (exit 2), and no
    // folder named `postgres:` is ever made.
    let pmm = Pmm::new();
    let line = "{\"kind\":\"user_message\",\"content\":\"hi\"}\n";
    for url in [
        "postgres://nobody@127.0.0.1:1/db?connect_timeout=2",
        "postgresql://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=2",
    ] {
        for (prog, args) in [
            ("pmm-append", vec![]),
            ("pmm-replay", vec![]),
            ("pmm-verify", vec![]),
            ("pmm-export", vec!["--format", "jsonl"]),
        ] {
            let by_flag = pmm.run(prog, &[&["--db", url][..], &args[..]].concat(), line);
            by_flag.assert_error(prog, &["127.0.0.1:1", "cannot connect"]);
            let by_env = pmm
                .cmd(prog)
                .env("PMM_DB", url)
                .env("PMM_CACHE_DIR", pmm.path("cache"))
                .args(&args)
                .write_stdin(line)
                .output()
                .unwrap();
            assert_eq!(by_env.status.code(), Some(2), "{prog} with PMM_DB={url}");
            let stderr = String::from_utf8_lossy(&by_env.stderr);
            assert!(stderr.contains("cannot connect"), "{stderr}");
        }
    }
    // A URL of any other scheme is still not a path.
    let r = pmm.run("pmm-append", &["--db", "mysql://h/db"], line);
    assert_eq!(r.code, 2, "{r:?}");
    let left: Vec<_> = std::fs::read_dir(pmm.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "cache" && n != ".cache")
        .collect();
    assert!(left.is_empty(), "nothing created: {left:?}");
}

/// A workspace whose ledger is a new database on `server`, with its own cache directory
/// (one "host"); `cache` names the directory, so that two workspaces can share a ledger.
pub(crate) fn on_server(server: &PgServer, url: Option<&str>, cache: &str) -> Pmm {
    let mut pmm = Pmm::new();
    pmm.db = PathBuf::from(url.map_or_else(|| server.database(), str::to_string));
    std::fs::create_dir_all(pmm.path(cache)).unwrap();
    let cache = pmm.path(cache);
    pmm.cache = Some(cache);
    pmm
}

/// Events as exported (JSON Lines), for comparing ledgers byte for byte.
pub(crate) fn export(pmm: &Pmm) -> String {
    let r = pmm.run("pmm-export", &["--format", "jsonl"], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.stdout
}

#[test]
fn every_program_works_on_a_postgres_ledger() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let pg = on_server(&server, None, "cache");
    let file = Pmm::new();
    for pmm in [&pg, &file] {
        let lines = "{\"kind\":\"user_message\",\"content\":\"I keep bees in Lisbon\"}\n{\"kind\":\"assistant_message\",\"content\":\"Noted: bees, Lisbon.\"}\n";
        let r = pmm.run("pmm-append", &[], lines);
        assert_eq!(r.code, 0, "{r:?}");
        let r = pmm.run(
            "pmm-turn",
            &["--adapter", "dummy", "where are my bees?"],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
        for slot in 1..=3 {
            let r = pmm.run("pmm-tick", &["--slot", &slot.to_string()], "");
            assert_eq!(r.code, 0, "{r:?}");
        }
        let r = pmm.run(
            "pmm-append",
            &["--kind", "user_message", "--content", "the bees swarmed"],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
    assert_eq!(export(&pg), export(&file), "the same events, byte for byte");
    let head = |pmm: &Pmm| pmm.run("pmm-verify", &["--root"], "").stdout;
    assert_eq!(head(&pg), head(&file), "the same Merkle root");
    // --deep rebuilds the turns' prompts on both (on PostgreSQL from this host's cache).
    let deep = |pmm: &Pmm| {
        let r = pmm.run("pmm-verify", &["--deep"], "");
        assert_eq!(r.code, 0, "{r:?}");
        r.summary()["deep"]["prompts"].clone()
    };
    let prompts = deep(&pg);
    assert_eq!(prompts["checked"], 1, "{prompts}");
    assert_eq!(prompts, deep(&file));
    for (prog, args) in [
        ("pmm-recall", vec!["bees", "--k", "3"]),
        ("pmm-replay", vec!["--state"]),
        ("pmm-replay", vec!["--tail", "3"]),
        ("pmm-metrics", vec![]),
        ("pmm-graph", vec!["stats"]),
        ("pmm-graph", vec!["export"]),
        ("pmm-export", vec!["--format", "json"]),
    ] {
        let a = pg.run(prog, &args, "");
        let b = file.run(prog, &args, "");
        assert_eq!(a.code, 0, "{prog} {args:?}: {a:?}");
        // Timings aside (pmm-metrics measures its replay), the same output.
        let untimed = |out: &str| {
            out.split(",\"replay_ms_per_event\"")
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(
            untimed(&a.stdout),
            untimed(&b.stdout),
            "{prog} {args:?} reads the same on both"
        );
    }
    let prove = |pmm: &Pmm| pmm.run("pmm-verify", &["--prove", "3"], "").stdout;
    assert_eq!(prove(&pg), prove(&file));
    // pmm-mcp over stdio: a recall and a remember.
    let session = concat!(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"recall","arguments":{"query":"bees"}}}"#,
        "\n",
    );
    let remember = session.replace(
        r#""name":"recall","arguments":{"query":"bees"}"#,
        r#""name":"remember","arguments":{"text":"queen bee marked blue"}"#,
    );
    // Requests are answered as they finish: compare the answers in id order.
    let answers = |r: &crate::harness::Run| {
        let mut lines: Vec<String> = r.stdout.lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    let a = pg.run("pmm-mcp", &[], session);
    let b = file.run("pmm-mcp", &[], session);
    assert_eq!(a.code, 0, "{a:?}");
    assert_eq!(answers(&a).len(), 2, "{a:?}");
    assert_eq!(answers(&a), answers(&b), "pmm-mcp answers the same on both");
    let a = pg.run("pmm-mcp", &[], &remember);
    let b = file.run("pmm-mcp", &[], &remember);
    assert_eq!(
        answers(&a),
        answers(&b),
        "pmm-mcp remembers the same on both"
    );
    assert!(export(&pg).contains("queen bee marked blue"));
    assert_eq!(export(&pg), export(&file));
    // Erasure reaches the server's row and the cache's indexes.
    let r = pg.run(
        "pmm-append",
        &["--erase", "1", "--reason", "test", "--source", "owner"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let row = server
        .psql(
            db_name(&pg),
            "SELECT length(content) FROM events WHERE id = 1",
        )
        .unwrap();
    assert_eq!(row.trim(), "0", "the server's row holds no text");
    let r = pg.run("pmm-recall", &["Lisbon"], "");
    assert!(!r.stdout.contains("keep bees"), "{r:?}");
    let r = pg.run("pmm-verify", &["--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
}

/// The database name of a workspace's URL.
pub(crate) fn db_name(pmm: &Pmm) -> &str {
    let url = pmm.db.to_str().unwrap();
    let tail = url.rsplit('/').next().unwrap();
    tail.split('?').next().unwrap()
}

#[test]
fn hosts_with_their_own_caches_share_one_chain() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database();
    let hosts: Vec<Pmm> = (0..3)
        .map(|h| on_server(&server, Some(&url), &format!("host{h}")))
        .collect();
    std::thread::scope(|s| {
        for (h, host) in hosts.iter().enumerate() {
            for w in 0..3 {
                s.spawn(move || {
                    for i in 0..15 {
                        let text = format!("host {h} writer {w} line {i}");
                        let r = host.run(
                            "pmm-append",
                            &["--kind", "user_message", "--content", &text],
                            "",
                        );
                        assert_eq!(r.code, 0, "{r:?}");
                    }
                });
            }
        }
    });
    let exports: Vec<String> = hosts.iter().map(export).collect();
    assert!(
        exports.iter().all(|e| *e == exports[0]),
        "every host sees one chain"
    );
    let ids: Vec<i64> = exports[0]
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(ids, (1..=135).collect::<Vec<_>>(), "every id once, no gap");
    for h in 0..3 {
        for w in 0..3 {
            for i in 0..15 {
                let text = format!("host {h} writer {w} line {i}\"");
                assert_eq!(exports[0].matches(&text).count(), 1, "{text} once");
            }
        }
    }
    let r = hosts[1].run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn a_row_changed_behind_pmms_back_is_a_hash_mismatch_and_the_writer_role_cannot_update() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let pmm = on_server(&server, None, "cache");
    pmm.seed(5);
    let db = db_name(&pmm).to_string();
    let refused = server.psql(&db, "UPDATE events SET kind = 'x' WHERE id = 2");
    assert!(
        refused.unwrap_err().contains("append-only"),
        "the trigger refuses it"
    );
    server
        .psql(
            &db,
            "ALTER TABLE events DISABLE TRIGGER USER; UPDATE events SET content = convert_to('edited', 'UTF8') WHERE id = 3; ALTER TABLE events ENABLE TRIGGER USER;",
        )
        .unwrap();
    let r = pmm.run("pmm-verify", &[], "");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("hash_mismatch"), "{r:?}");
    // A host whose cache never saw event 3 refuses to copy it.
    let other = on_server(&server, pmm.db.to_str(), "fresh-cache");
    let r = other.run("pmm-replay", &[], "");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("hash_mismatch") || r.stderr.contains("hash is not"),
        "{r:?}"
    );
}

#[test]
fn a_database_made_again_under_a_hosts_cache_is_refused_until_the_operator_accepts_it() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let pmm = on_server(&server, None, "cache");
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "first life"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let db = db_name(&pmm).to_string();
    // The database is dropped and made again under the same name: another chain, which
    // this host never verified (issue 44, N3: it used to be followed silently).
    server
        .psql("postgres", &format!("DROP DATABASE {db}"))
        .unwrap();
    server
        .psql("postgres", &format!("CREATE DATABASE {db}"))
        .unwrap();
    let second = ["--kind", "user_message", "--content", "second life"];
    let r = pmm.run("pmm-append", &second, "");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("rolled_back"), "{r:?}");
    // An empty server verifies only with --allow-empty.
    let r = pmm.run(
        "pmm-verify",
        &["--accept-restored-server", "--allow-empty"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let r = pmm.run("pmm-append", &second, "");
    assert_eq!(r.code, 0, "{r:?}");
    let out = export(&pmm);
    assert!(
        out.contains("second life") && !out.contains("first life"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1);
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn the_reference_ledger_round_trips_through_postgres_byte_identical() {
    let Some(src) = crate::harness::fixture_path(crate::harness::GPT_LEDGER) else {
        return;
    };
    let Some(server) = PgServer::start() else {
        return;
    };
    let file = Pmm::new();
    let r = file.run(
        "pmm-append",
        &["--import", src.to_str().unwrap(), "--accept-forks"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let pg = on_server(&server, None, "cache");
    let exported = file.run("pmm-export", &["--format", "json"], "");
    assert_eq!(exported.code, 0);
    std::fs::write(pg.path("ref.json"), &exported.stdout).unwrap();
    let r = pg.run(
        "pmm-append",
        &["--import", "ref.json", "--accept-forks"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        pg.run("pmm-export", &["--format", "json"], "").stdout,
        exported.stdout
    );
    let root = |p: &Pmm| p.run("pmm-verify", &["--root"], "").stdout;
    assert_eq!(root(&pg), root(&file));
    // And back: PostgreSQL to a file.
    let back = Pmm::new();
    std::fs::write(
        back.path("pg.json"),
        pg.run("pmm-export", &["--format", "json"], "").stdout,
    )
    .unwrap();
    let r = back.run("pmm-append", &["--import", "pg.json", "--accept-forks"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        back.run("pmm-export", &["--format", "json"], "").stdout,
        exported.stdout
    );
}

#[test]
fn the_throwaway_server_starts_and_stops() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let dir = server.dir().to_path_buf();
    assert_eq!(server.psql("postgres", "SELECT 1").unwrap().trim(), "1");
    let url = server.database();
    assert!(url.starts_with("postgres://postgres@127.0.0.1:"), "{url}");
    drop(server);
    assert!(!dir.exists(), "its directory is gone with it");
}

#[test]
fn a_writer_role_and_a_reader_role_get_only_what_docs_scale_out_grants() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let owner = on_server(&server, None, "cache");
    owner.seed(3);
    let db = db_name(&owner).to_string();
    // The grants of docs/scale-out.md, verbatim in substance.
    server
        .psql(
            &db,
            "CREATE ROLE pmm_writer LOGIN; CREATE ROLE pmm_reader LOGIN;
             GRANT SELECT, INSERT ON events TO pmm_writer;
             GRANT SELECT, UPDATE ON pmm_head TO pmm_writer;
             GRANT SELECT ON pmm_schema, pmm_erasures TO pmm_writer;
             GRANT SELECT, INSERT ON pmm_vectors, pmm_embed_models TO pmm_writer;
             GRANT USAGE ON SEQUENCE pmm_vectors_seq_seq TO pmm_writer;
             GRANT EXECUTE ON FUNCTION pmm_erase_text(bigint) TO pmm_writer;
             GRANT SELECT ON events, pmm_head, pmm_schema, pmm_vectors, pmm_embed_models TO pmm_reader;",
        )
        .unwrap();
    let as_role = |role: &str, cache: &str| {
        let url = owner
            .db
            .to_str()
            .unwrap()
            .replace("postgres@", &format!("{role}@"));
        on_server(&server, Some(&url), cache)
    };
    let writer = as_role("pmm_writer", "w");
    let r = writer.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "from the writer"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let m = crate::embed::model(&writer, "m", 1, 16);
    let r = writer.run(
        "pmm-turn",
        &[
            "--adapter",
            "dummy",
            "--embed-model",
            m.to_str().unwrap(),
            "hello",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let r = writer.run(
        "pmm-append",
        &["--erase", "1", "--reason", "test", "--source", "owner"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let update = server.psql_as(
        "pmm_writer",
        &db,
        "UPDATE events SET kind = 'x' WHERE id = 2",
    );
    assert!(
        update.unwrap_err().contains("permission denied"),
        "no UPDATE grant"
    );
    let delete = server.psql_as("pmm_writer", &db, "DELETE FROM events WHERE id = 2");
    assert!(delete.is_err(), "no DELETE either");
    let reader = as_role("pmm_reader", "r");
    for (prog, args) in [
        ("pmm-replay", vec!["--state"]),
        ("pmm-recall", vec!["writer"]),
        ("pmm-verify", vec![]),
        ("pmm-export", vec!["--format", "jsonl"]),
    ] {
        let r = reader.run(prog, &args, "");
        assert_eq!(r.code, 0, "{prog} as the reader: {r:?}");
    }
    let r = reader.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "no"],
        "",
    );
    assert_eq!(r.code, 2, "the reader cannot append: {r:?}");
    assert!(r.stderr.contains("permission denied"), "{r:?}");
    assert_eq!(export(&owner), export(&reader), "one chain, seen alike");
    let r = owner.run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
}

/// A workspace on a new database of `server` whose sessions the server ends after `idle_ms`
/// idle inside a transaction (a database setting, shorter than pmm's own, which pmm keeps).
fn on_server_idle_for(server: &PgServer, idle_ms: u64) -> Pmm {
    let pg = on_server(server, None, "cache");
    let db = db_name(&pg).to_string();
    server
        .psql(
            &db,
            &format!("ALTER DATABASE {db} SET idle_in_transaction_session_timeout = {idle_ms}"),
        )
        .unwrap();
    pg
}

/// Issue 47: an import whose local work (reading and verifying the source, the cache's
/// inserts) outlasts the server's `idle_in_transaction_session_timeout` went idle in the
/// server's transaction until the server ended the session (25P03), and nothing was imported.
/// It now pushes to the server as it goes, within the timeout, and is still one transaction:
/// a source refused at its last event leaves nothing on the server, though most of it was
/// pushed before that event was read. The database's timeout is lowered (pmm keeps a shorter
/// one than its own) so that a modest import reproduces it.
#[test]
fn an_import_that_outlasts_the_idle_timeout_goes_through_whole_or_not_at_all() {
    let Some(server) = PgServer::start() else {
        return;
    };
    const IDLE_MS: u64 = 1_000;
    // More than an import's 65,536 events between two catch-ups of the cache's indexes.
    const EVENTS: usize = 70_000;
    let mut rows: Vec<serde_json::Value> = (1..=EVENTS)
        .map(|id| {
            serde_json::json!({"id": id, "ts": "2025-01-01T00:00:00Z", "kind": "user_message",
                "content": format!("line {id} of a long import"), "meta": {"role": "user"}})
        })
        .collect();
    let source = crate::harness::rechain(&mut rows);
    let pg = on_server_idle_for(&server, IDLE_MS);
    std::fs::write(pg.path("events.jsonl"), &source).unwrap();
    let started = std::time::Instant::now();
    let r = pg.run("pmm-append", &["--import", "events.jsonl"], "");
    let took = started.elapsed();
    assert_eq!(r.code, 0, "after {took:?}: {}", r.stderr);
    assert!(
        took > std::time::Duration::from_millis(IDLE_MS),
        "the import ({took:?}) must outlast the timeout to test anything: import more events"
    );
    let exported: Vec<serde_json::Value> = export(&pg)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(exported == rows, "the server holds the source's events");
    let r = pg.run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "{r:?}");

    // The same source with its last event's text changed: refused, and nothing of it exists.
    let mut tampered: Vec<&str> = source.lines().collect();
    let last = tampered
        .pop()
        .unwrap()
        .replace("of a long import", "changed");
    let tampered = tampered.join("\n") + "\n" + &last + "\n";
    let empty = on_server_idle_for(&server, IDLE_MS);
    std::fs::write(empty.path("tampered.jsonl"), tampered).unwrap();
    let r = empty.run("pmm-append", &["--import", "tampered.jsonl"], "");
    r.assert_error("pmm-append", &["event 70000: stored hash"]);
    let db = db_name(&empty).to_string();
    assert_eq!(
        server
            .psql(
                &db,
                "SELECT (SELECT count(*) FROM events), (SELECT id FROM pmm_head)"
            )
            .unwrap()
            .trim(),
        "0|0",
        "nothing of a refused import is on the server"
    );
}

#[test]
fn a_writer_killed_while_it_holds_the_head_lock_leaves_nothing_and_the_others_go_on() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let pmm = on_server(&server, None, "cache");
    pmm.seed(3);
    let before = export(&pmm);
    // A tick that waits inside its write transaction (the testing aid), holding the lock.
    let mut tick = pmm.std_cmd("pmm-tick");
    tick.env("PMM_TEST_TICK_PAUSE_MS", "60000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = tick.spawn().unwrap();
    let db = db_name(&pmm).to_string();
    let held = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        server
            .psql(&db, "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'pmm_head' AND l.mode = 'RowShareLock' AND l.granted")
            .is_ok_and(|n| n.trim() != "0")
    });
    assert!(held, "the tick holds the head row");
    let appender = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let started = std::time::Instant::now();
            let r = pmm.run(
                "pmm-append",
                &[
                    "--busy-timeout",
                    "20000",
                    "--kind",
                    "user_message",
                    "--content",
                    "after the kill",
                ],
                "",
            );
            (r, started.elapsed())
        });
        std::thread::sleep(std::time::Duration::from_millis(500));
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        waiting.join().unwrap()
    });
    let (r, waited) = appender;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        waited < std::time::Duration::from_secs(15),
        "it went on once the writer died: {waited:?}"
    );
    let after = export(&pmm);
    assert!(after.starts_with(&before), "{after}");
    assert_eq!(
        after.lines().count(),
        before.lines().count() + 1,
        "only the append: nothing of the tick"
    );
    assert!(!after.contains("autonomy_tick"));
    let r = pmm.run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn recall_on_postgres_gives_the_same_ids_in_the_same_order_as_on_sqlite_for_the_locomo_questions() {
    let Some(dir) = crate::harness::fixture_path("locomo-dev") else {
        return;
    };
    if !crate::harness::tool_or_skip("python3", "scripts/recall-bench --emit") {
        return;
    }
    let Some(server) = PgServer::start() else {
        return;
    };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/recall-bench");
    let mut conversations: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    conversations.sort();
    assert!(!conversations.is_empty());
    for conv in conversations {
        let pg = on_server(&server, None, "cache");
        let file = Pmm::new();
        let questions = file.path("q.txt");
        let lines = std::process::Command::new("python3")
            .arg(&script)
            .arg("--emit")
            .arg(&conv)
            .args(["--after", "2020-01-01T00:00:00Z", "--questions-to"])
            .arg(&questions)
            .output()
            .unwrap();
        assert!(lines.status.success(), "{lines:?}");
        let lines = String::from_utf8(lines.stdout).unwrap();
        let asked = std::fs::read_to_string(&questions).unwrap();
        let mut answers = Vec::new();
        for pmm in [&pg, &file] {
            let r = pmm.run("pmm-append", &["--keep-ts", "--batch", "--quiet"], &lines);
            assert_eq!(r.code, 0, "{r:?}");
            let r = pmm.run("pmm-recall", &["--lines", "--budget", "8000"], &asked);
            assert_eq!(r.code, 0, "{r:?}");
            let ids: Vec<(i64, i64)> = r
                .records()
                .iter()
                .filter_map(|v| Some((v["line"].as_i64()?, v["id"].as_i64()?)))
                .collect();
            answers.push(ids);
        }
        assert!(
            !answers[0].is_empty(),
            "{}: something recalled",
            conv.display()
        );
        assert_eq!(
            answers[0],
            answers[1],
            "{}: the same ids in the same order",
            conv.display()
        );
    }
}

/// How many vectors a host's cache file holds (`PMM_CACHE_DIR` has one per ledger).
fn cached_vectors(host: &Pmm) -> i64 {
    let dir = host.cache.as_ref().unwrap();
    let file = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "db"))
        .expect("a cache file");
    let c = rusqlite::Connection::open(file).unwrap();
    c.query_row("SELECT count(*) FROM pmm_vectors", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn embedding_vectors_are_stored_once_on_the_server_and_shared_by_every_host() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let a = on_server(&server, None, "host-a");
    crate::embed::conversation(&a);
    let m = crate::embed::model(&a, "m", 1, 16);
    let m = m.to_str().unwrap();
    let r = a.run("pmm-recall", &["--embed", "--embed-model", m], "");
    assert_eq!(r.code, 0, "{r:?}");
    let r = a.run(
        "pmm-turn",
        &[
            "--adapter",
            "dummy",
            "--embed-model",
            m,
            "what did Caroline paint?",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let db = db_name(&a).to_string();
    let count = |sql: &str| -> i64 { server.psql(&db, sql).unwrap().trim().parse().unwrap() };
    let shared = count("SELECT count(*) FROM pmm_vectors");
    assert!(
        shared >= 8,
        "the backfill's and the turn's vectors reached the server: {shared}"
    );
    assert_eq!(cached_vectors(&a), shared);
    // Another host, whose cache starts empty, gets them without embedding anything (it only
    // reads).
    let b = on_server_again(&server, &a, "host-b");
    let r = b.run("pmm-replay", &["--tail", "1"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(cached_vectors(&b), shared, "host b copied every vector");
    let recall = |p: &Pmm| {
        p.run("pmm-recall", &["--embed-model", m, "canvas painting"], "")
            .stdout
    };
    assert_eq!(
        recall(&a),
        recall(&b),
        "both hosts recall alike, by text and by meaning"
    );
    // Erasure takes the vectors along, on the server and on the other host.
    let r = a.run(
        "pmm-append",
        &["--erase", "3", "--reason", "test", "--source", "owner"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(count("SELECT count(*) FROM pmm_vectors WHERE id = 3"), 0);
    let r = b.run("pmm-replay", &["--tail", "1"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        cached_vectors(&b),
        count("SELECT count(*) FROM pmm_vectors")
    );
    assert_eq!(cached_vectors(&b), shared - 1);
}

/// Another host (its own cache directory `cache`) on `other`'s ledger.
fn on_server_again(server: &PgServer, other: &Pmm, cache: &str) -> Pmm {
    on_server(server, other.db.to_str(), cache)
}

#[test]
fn proofs_batches_and_signed_checkpoints_work_on_a_postgres_ledger() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let pg = on_server(&server, None, "cache");
    let file = Pmm::new();
    let batch: String = (0..23)
        .map(|i| format!("{{\"kind\":\"user_message\",\"content\":\"line {i}\"}}\n"))
        .collect();
    for pmm in [&pg, &file] {
        let r = pmm.run("pmm-append", &["--batch"], &batch);
        assert_eq!(r.code, 0, "{r:?}");
    }
    let vkey = crate::merkle::keygen(&pg);
    let cp = crate::merkle::checkpoint(&pg, "cp.txt");
    let r = pg.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "after"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let r = file.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "after"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let r = pg.run("pmm-verify", &["--checkpoint", &cp, "--key", &vkey], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("\"ok\":true"), "{r:?}");
    for args in [
        vec!["--consistency", "10", "24"],
        vec!["--prove", "17", "--size", "23"],
        vec!["--root", "--size", "23"],
    ] {
        let a = pg.run("pmm-verify", &args, "");
        assert_eq!(a.code, 0, "{args:?}: {a:?}");
        assert_eq!(
            a.stdout,
            file.run("pmm-verify", &args, "").stdout,
            "{args:?}"
        );
    }
    // A tampered row fails the checkpoint check, as on a file.
    let db = db_name(&pg).to_string();
    server
        .psql(
            &db,
            "ALTER TABLE events DISABLE TRIGGER USER; UPDATE events SET content = convert_to('edited', 'UTF8') WHERE id = 5; ALTER TABLE events ENABLE TRIGGER USER;",
        )
        .unwrap();
    let r = pg.run("pmm-verify", &["--checkpoint", &cp, "--key", &vkey], "");
    assert_eq!(
        r.code, 1,
        "the checkpoint check reads the server's rows: {r:?}"
    );
}

/// Runs openssl with `args` in `dir`.
/// A server with `ssl=on` serving `dir`'s `server.pem` and `server.key`, and a new database on
/// it (its name); `None` when no server can start here.
pub(crate) fn tls_server(dir: &std::path::Path) -> Option<(PgServer, String)> {
    use std::os::unix::fs::PermissionsExt;
    let key = dir.join("server.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    if unsafe { libc::geteuid() } == 0 {
        // The server runs as postgres: its key must be postgres's own.
        let status = std::process::Command::new("chown")
            .args(["-R", "postgres:", dir.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let cert = format!("ssl_cert_file={}", dir.join("server.pem").display());
    let key = format!("ssl_key_file={}", key.display());
    let server = PgServer::start_with(&["ssl=on", &cert, &key])?;
    let url = server.database();
    let tail = url.rsplit('/').next().unwrap().to_string();
    let db = tail.split('?').next().unwrap().to_string();
    Some((server, db))
}

pub(crate) fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

#[test]
fn tls_verify_full_checks_the_servers_certificate_and_its_name() {
    if !crate::harness::tool_or_skip("openssl", "the PostgreSQL TLS test's certificates") {
        return;
    }
    // A CA, a server certificate it signs for the name `localhost` only, and a stranger CA.
    let certs = tempfile::Builder::new()
        .prefix("pmm-pg-tls-")
        .tempdir_in("/tmp")
        .unwrap();
    let d = certs.path();
    let subj = |cn: &str| format!("/CN={cn}");
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            &subj("pmm test ca"),
        ],
    );
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "other.key",
            "-out",
            "other.pem",
            "-days",
            "2",
            "-subj",
            &subj("someone else"),
        ],
    );
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            &subj("localhost"),
        ],
    );
    std::fs::write(d.join("ext.cnf"), "subjectAltName=DNS:localhost\n").unwrap();
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    let Some((server, db)) = tls_server(d) else {
        return;
    };
    let ca = d.join("ca.pem");
    let other = d.join("other.pem");
    let url = |host: &str, mode: &str, root: &std::path::Path| {
        format!(
            "postgres://postgres@{host}:{}/{db}?sslmode={mode}&sslrootcert={}&connect_timeout=5",
            server.port(),
            root.display()
        )
    };
    let append = |u: String| {
        let mut pmm = Pmm::new();
        pmm.db = PathBuf::from(u);
        pmm.cache = Some(pmm.path("cache"));
        pmm.run(
            "pmm-append",
            &["--kind", "user_message", "--content", "over TLS"],
            "",
        )
    };
    // The right CA and the certificate's name: it connects.
    let r = append(url("localhost", "verify-full", &ca));
    assert_eq!(r.code, 0, "{r:?}");
    // The right CA, but the host is not the name the certificate gives: verify-full refuses,
    // verify-ca (the chain only) connects.
    let r = append(url("127.0.0.1", "verify-full", &ca));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("cannot connect"), "{r:?}");
    let r = append(url("127.0.0.1", "verify-ca", &ca));
    assert_eq!(r.code, 0, "{r:?}");
    // A CA that did not sign it: refused, whatever the name.
    let r = append(url("localhost", "verify-full", &other));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.to_lowercase().contains("certificate"), "{r:?}");
    let r = append(url("localhost", "verify-ca", &other));
    assert_eq!(r.code, 2, "{r:?}");
    let rows = server.psql(&db, "SELECT count(*) FROM events").unwrap();
    assert_eq!(rows.trim(), "2", "only the two verified connections wrote");
}

/// `pmm-append` streaming lines into PostgreSQL (issue 47): plain lines are linked by the
/// server, the lines already waiting committed together in one transaction; a line whose
/// checks read the ledger (a config, a correction) goes its own way in order; every line is
/// printed once committed, the chain is what a SQLite ledger gets from the same lines, and a
/// bad line stops the stream with the lines before it committed.
#[test]
fn streamed_lines_are_committed_together_in_order_and_hash_as_on_sqlite() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let pg = on_server(&server, None, "hostA");
    let sqlite = Pmm::new();
    let mut lines = String::new();
    for i in 0..60 {
        let line = match i {
            20 => r#"{"kind":"config","content":"{\"type\":\"retrieval\",\"limit\":5}","meta":{"source":"operator"}}"#.to_string(),
            30 => r#"{"kind":"user_message","content":"I moved to Berlin","meta":{"supersedes":[3]}}"#.to_string(),
            _ => format!(r#"{{"kind":"user_message","content":"line {i} it's \\ odd é😀","meta":{{"i":{i}}}}}"#),
        };
        lines.push_str(&line);
        lines.push('\n');
    }
    let clock = [("PMM_NOW", "2026-01-01T00:00:00Z")];
    let run = |p: &Pmm, input: &str| {
        let out = p
            .cmd("pmm-append")
            .envs(clock)
            .write_stdin(input.as_bytes().to_vec())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, printed, stderr) = run(&pg, &lines);
    assert_eq!(code, Some(0), "{stderr}");
    let ids: Vec<i64> = printed
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        ids,
        (1..=60).collect::<Vec<_>>(),
        "each line printed once, in order"
    );
    let (code, _, stderr) = run(&sqlite, &lines);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        export(&pg),
        export(&sqlite),
        "the chain a SQLite ledger gets"
    );
    let xacts = server
        .psql(
            db_name(&pg),
            "SELECT count(DISTINCT xmin::text) FROM events",
        )
        .unwrap();
    let xacts: usize = xacts.trim().parse().unwrap();
    assert!(xacts < 20, "60 lines waiting, {xacts} transactions");
    // A bad line: the lines before it are committed and printed, it and those after are not.
    let (code, printed, stderr) = run(&pg, "{\"kind\":\"user_message\",\"content\":\"a\"}\n{\"kind\":\"user_message\",\"content\":\"b\"}\nnot json\n{\"kind\":\"user_message\",\"content\":\"c\"}\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("<stdin>:3"), "{stderr}");
    assert_eq!(printed.lines().count(), 2, "{printed}");
    assert_eq!(
        server
            .psql(db_name(&pg), "SELECT max(id) FROM events")
            .unwrap()
            .trim(),
        "62"
    );
    ok(
        &pg.run("pmm-verify", &[], ""),
        "the cache equals the server",
    );
}

fn ok(r: &crate::harness::Run, what: &str) {
    assert_eq!(r.code, 0, "{what}: {r:?}");
}
