//! Forgetting by subject (issue 46, items 2, 4 and 5): `pmm-append --erase-query`,
//! `--erase-concept`, `--erase-source`, `--erase-range`, `--dry-run`, all of a selection in one
//! transaction (nothing of it after a SIGKILL), the texts gone from the file's bytes, a
//! checkpoint signed before still checking, `--deep` clean, and `--receipt`.

use crate::harness::{Pmm, Run};
use serde_json::{json, Value};
use std::time::Duration;

/// A reply whose JSON header names `concepts`.
fn reply(concepts: &[&str], body: &str) -> String {
    let header = json!({
        "intent": "answer", "outcome": "ok", "next": "listen", "self_model": "steady",
        "concepts": concepts,
    });
    serde_json::to_string(&format!("{header}\n{body}")).unwrap()
}

/// Twelve turns; the user's message and the reply of every third are about the pets (bound
/// to `topic.pets`), the others the garden.
fn conversation(pmm: &Pmm) -> Vec<String> {
    let mut pets = Vec::new();
    let turns: Vec<(String, String)> = (0..12)
        .map(|i| {
            if i % 3 == 0 {
                let user = format!("My sister's dog Biscuit chewed slipper number {i}.");
                pets.push(user.clone());
                (user, reply(&["topic.pets"], "Dogs do that."))
            } else {
                let user = format!("The tomatoes in bed {i} are ripening.");
                (user, reply(&["topic.garden"], "Lovely."))
            }
        })
        .collect();
    let script = pmm.path("replies.jsonl");
    let lines: String = turns.iter().map(|(_, r)| format!("{r}\n")).collect();
    std::fs::write(&script, lines).unwrap();
    for (user, _) in &turns {
        let args = [
            "--adapter",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            user,
        ];
        let r = pmm.run("pmm-turn", &args, "");
        assert_eq!(r.code, 0, "{r:?}");
    }
    pets
}

fn forget(pmm: &Pmm, args: &[&str]) -> Run {
    pmm.run("pmm-append", args, "")
}

fn deep_clean(pmm: &Pmm) {
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.findings().len(), 0, "{r:?}");
}

#[test]
fn a_concept_is_forgotten_with_its_quotes() {
    let pmm = Pmm::new();
    let pets = conversation(&pmm);
    // A checkpoint signed before the erasure.
    let key = pmm.path("log.key");
    let r = pmm.run(
        "pmm-export",
        &[
            "--keygen",
            "test.example/log",
            "--key",
            key.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let vkey = r.stdout.trim().to_string();
    let r = pmm.run(
        "pmm-export",
        &["--checkpoint", "--key", key.to_str().unwrap()],
        "",
    );
    let before = pmm.path("before.txt");
    std::fs::write(&before, &r.stdout).unwrap();
    let count = pmm.count();
    // The dry run lists every event and writes nothing.
    let r = forget(&pmm, &["--erase-concept", "topic.pets", "--dry-run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let would = r.of_type("would_erase");
    assert!(would.len() >= 8, "{r:?}");
    for text in &pets {
        assert!(
            would.iter().any(|w| w["content"] == text.as_str()),
            "{text}: {r:?}"
        );
    }
    assert_eq!(r.of_type("erasure")[0]["dry_run"], true);
    assert_eq!(pmm.count(), count);
    // Forget it, with the receipt.
    let receipt = pmm.path("receipt.json");
    let r = forget(
        &pmm,
        &[
            "--erase-concept",
            "topic.pets",
            "--with-quotes",
            "--reason",
            "forget the dog",
            "--source",
            "owner",
            "--receipt",
            receipt.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let summary = &r.of_type("erasure")[0];
    let erased = summary["erased"].as_array().unwrap().len();
    assert!(erased >= 8, "{r:?}");
    let erasures: Vec<Value> = r
        .records()
        .into_iter()
        .filter(|v| v["kind"] == "erasure")
        .collect();
    assert_eq!(erasures.len(), erased);
    for text in &pets {
        assert_eq!(
            crate::harness::occurrences(&pmm, "Biscuit chewed slipper"),
            0,
            "{text}"
        );
    }
    // Recall no longer finds it; verification holds; the old checkpoint still checks.
    let found = pmm.run("pmm-recall", &["Biscuit slipper"], "").records();
    assert!(
        found
            .iter()
            .all(|v| !v["content"].as_str().unwrap_or("").contains("Biscuit")),
        "{found:?}"
    );
    let r = pmm.run(
        "pmm-verify",
        &["--checkpoint", before.to_str().unwrap(), "--key", &vkey],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    deep_clean(&pmm);
    // The receipt: ids, hashes, a checkpoint taken after that checks, and proofs that check
    // against it with no ledger.
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap()).unwrap();
    assert_eq!(rec["erased"].as_array().unwrap().len(), erased);
    assert_eq!(rec["size"].as_u64(), Some(pmm.count()));
    let cp = pmm.path("after.txt");
    std::fs::write(&cp, rec["checkpoint"].as_str().unwrap()).unwrap();
    let r = pmm.run(
        "pmm-verify",
        &["--checkpoint", cp.to_str().unwrap(), "--key", &vkey],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let first = &rec["erased"][0];
    assert_eq!(first["hash"].as_str().unwrap().len(), 64);
    let proof = pmm.path("proof.json");
    std::fs::write(&proof, first["proof"].to_string()).unwrap();
    let r = pmm.run(
        "pmm-verify",
        &[
            "--check-proof",
            proof.to_str().unwrap(),
            "--checkpoint",
            cp.to_str().unwrap(),
            "--key",
            &vkey,
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["ok"], true, "{r:?}");
}

#[test]
fn query_source_and_range_select_what_they_name() {
    let pmm = Pmm::new();
    let meta = |s: &str| json!({"role": "user", "source": s}).to_string();
    for (i, (text, source, ts)) in [
        (
            "the guest left a note about parrots",
            "mcp:guest",
            "2024-01-05T10:00:00Z",
        ),
        (
            "owner note on the garden shed",
            "owner",
            "2024-02-05T10:00:00Z",
        ),
        (
            "another guest remark on parrots",
            "mcp:guest",
            "2024-03-05T10:00:00Z",
        ),
        (
            "owner thinks about parrots too",
            "owner",
            "2024-04-05T10:00:00Z",
        ),
    ]
    .iter()
    .enumerate()
    {
        let line = json!({"kind": "user_message", "content": text, "meta": serde_json::from_str::<Value>(&meta(source)).unwrap(), "ts": ts});
        let r = pmm.run("pmm-append", &["--keep-ts"], &format!("{line}\n"));
        assert_eq!(r.code, 0, "{i}: {r:?}");
    }
    let dry = |args: &[&str]| -> Vec<i64> {
        let mut all = args.to_vec();
        all.push("--dry-run");
        let r = forget(&pmm, &all);
        assert_eq!(r.code, 0, "{r:?}");
        r.of_type("erasure")[0]["erased"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect()
    };
    assert_eq!(dry(&["--erase-source", "mcp:guest"]), [1, 3]);
    assert_eq!(dry(&["--erase-range", "2024-02-01..2024-03-05"]), [2, 3]);
    assert_eq!(
        dry(&["--erase-range", "2024-04-05T10:00:00Z..2024-12-31"]),
        [4]
    );
    let parrots = dry(&["--erase-query", "parrots", "--min-score", "0.01"]);
    assert!(
        parrots.contains(&1) && parrots.contains(&3) && parrots.contains(&4),
        "{parrots:?}"
    );
    assert!(dry(&["--erase-query", "parrots", "--min-score", "5"]).is_empty());
    // A bad range, a missing reason, a query without its score: exit 2, nothing written.
    assert_eq!(
        forget(
            &pmm,
            &["--erase-range", "2024-05-01..2024-01-01", "--dry-run"]
        )
        .code,
        2
    );
    assert_eq!(forget(&pmm, &["--erase-source", "mcp:guest"]).code, 2);
    assert_eq!(
        forget(&pmm, &["--erase-query", "parrots", "--dry-run"]).code,
        2
    );
    assert_eq!(pmm.count(), 4);
    let r = forget(
        &pmm,
        &[
            "--erase-source",
            "mcp:guest",
            "--reason",
            "guest data",
            "--source",
            "owner",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        crate::harness::occurrences(&pmm, "parrots"),
        1,
        "only the owner's message keeps the word"
    );
    // What is erased is not selected again.
    assert!(dry(&["--erase-source", "mcp:guest"]).is_empty());
    deep_clean(&pmm);
}

#[test]
fn an_untrusted_actor_cannot_forget_by_subject() {
    let pmm = Pmm::new();
    let meta = json!({"role": "user", "source": "owner"}).to_string();
    let r = pmm.run(
        "pmm-append",
        &[
            "--kind",
            "user_message",
            "--content",
            "hello",
            "--meta",
            &meta,
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let r = forget(&pmm, &["--erase-source", "owner", "--reason", "x"]);
    assert_eq!(r.code, 1, "cli is not trusted with erasure: {r:?}");
    let events = pmm.run("pmm-replay", &[], "").records();
    assert_eq!(events[0]["content"], "hello");
    assert_eq!(events[1]["kind"], "violation");
    assert_eq!(events.len(), 2);
}

/// A SIGKILL in the middle of a large forget leaves none of it: every text is still there,
/// no erasure event, the ledger verifies; the forget then runs whole.
#[test]
fn sigkill_in_the_middle_of_a_large_forget_leaves_none_of_it() {
    let pmm = Pmm::new();
    let lines: String = (0..600)
        .map(|i| format!("{}\n", json!({"kind": "user_message", "content": format!("guest line {i} about quinces"), "meta": {"source": "mcp:guest"}})))
        .collect();
    let r = pmm.run("pmm-append", &["--batch"], &lines);
    assert_eq!(r.code, 0, "{r:?}");
    let count = pmm.count();
    let mut child = pmm
        .std_cmd("pmm-append")
        .args([
            "--erase-source",
            "mcp:guest",
            "--reason",
            "retire the guest",
            "--source",
            "owner",
        ])
        .env(pmm::store::erase_pause_env(), "8000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::tick::wait_for_write_lock(&pmm);
    // Every erasure is written by now (600 small ones), waiting to commit.
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    assert!(!child.wait().unwrap().success());
    assert_eq!(pmm.count(), count, "no erasure event");
    let kept = pmm.run("pmm-replay", &[], "").records();
    assert_eq!(
        kept.iter()
            .filter(|e| e["content"].as_str().unwrap().contains("about quinces"))
            .count(),
        600
    );
    let r = pmm.run("pmm-verify", &["--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.summary()["hash_mismatches"], 0, "{r:?}");
    let r = forget(
        &pmm,
        &[
            "--erase-source",
            "mcp:guest",
            "--reason",
            "retire the guest",
            "--source",
            "owner",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(pmm.count(), count * 2);
    assert_eq!(crate::harness::occurrences(&pmm, "about quinces"), 0);
    deep_clean(&pmm);
}

/// Over MCP (issue 46, item 4): an `admin` token may forget and correct; `read` and `write`
/// tokens get a tool error and the attempt is a `violation` event on the ledger.
#[test]
fn only_an_admin_token_forgets_and_corrects() {
    use pmm::mcp::tokens::{Caller, Scope};
    use pmm::mcp::tools::{call_as, Config};
    let pmm = Pmm::new();
    let meta = json!({"role": "user", "source": "mcp:guest"}).to_string();
    for text in ["guest says the plums are sour", "guest says hello"] {
        let r = pmm.run(
            "pmm-append",
            &["--kind", "user_message", "--content", text, "--meta", &meta],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
    let clock = pmm::event::Clock::pinned("2025-11-25T00:00:00Z").unwrap();
    let cfg = Config::new(pmm.db.clone(), false, 5000, clock);
    let caller = |name: &str, scope| Caller {
        name: name.into(),
        scope,
        source: format!("mcp:{name}"),
    };
    let args = |v: Value| v.as_object().cloned().unwrap();
    for (name, scope) in [("reader", Scope::Read), ("writer", Scope::Write)] {
        let c = caller(name, scope);
        let e = call_as(
            &cfg,
            Some(&c),
            "forget",
            args(json!({"ids": [1], "reason": "x"})),
        )
        .unwrap_err();
        assert!(e.0.contains("needs an admin token"), "{e}");
        let e = call_as(
            &cfg,
            Some(&c),
            "correct",
            args(json!({"text": "y", "supersedes": [1]})),
        )
        .unwrap_err();
        assert!(e.0.contains("needs an admin token"), "{e}");
    }
    let violations = pmm
        .run("pmm-replay", &["--kind", "violation"], "")
        .records();
    assert_eq!(violations.len(), 4, "{violations:?}");
    assert_eq!(violations[0]["meta"]["actor"], "mcp:reader");
    assert_eq!(violations[0]["meta"]["attempt_kind"], "erasure");
    assert_eq!(violations[3]["meta"]["attempt_kind"], "user_message");
    assert!(violations[1]["meta"]["reason"]
        .as_str()
        .unwrap()
        .contains("read-scoped"));
    assert_eq!(crate::harness::occurrences(&pmm, "plums are sour"), 1);
    // The admin token: a dry run, then the forget and a correction.
    let admin = caller("owner", Scope::Admin);
    let dry = call_as(
        &cfg,
        Some(&admin),
        "forget",
        args(json!({"query": "plums sour", "min_score": 0.01, "reason": "x", "dry_run": true})),
    )
    .unwrap();
    assert_eq!(dry["would_erase"][0]["id"], 1, "{dry}");
    assert_eq!(crate::harness::occurrences(&pmm, "plums are sour"), 1);
    let done = call_as(
        &cfg,
        Some(&admin),
        "forget",
        args(json!({"source": "mcp:guest", "reason": "guest data"})),
    )
    .unwrap();
    assert_eq!(done["erased"], json!([1, 2]), "{done}");
    assert_eq!(done["erasures"][0]["meta"]["source"], "mcp:owner");
    assert_eq!(crate::harness::occurrences(&pmm, "plums are sour"), 0);
    let fixed = call_as(
        &cfg,
        Some(&admin),
        "correct",
        args(json!({"text": "the plums are sweet now", "supersedes": [1], "kind": "user_message"})),
    )
    .unwrap();
    assert_eq!(fixed["event"]["meta"]["supersedes"], json!([1]));
    deep_clean(&pmm);
}

/// The server's database at `url` as `pg_dump` writes it after `VACUUM FULL` (no dead row
/// left to hold an erased text).
fn dump_after_vacuum(server: &crate::pgserver::PgServer, url: &str) -> String {
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap();
    server.psql(db, "VACUUM FULL").unwrap();
    let pg_dump = crate::pgserver::server_bin().unwrap().join("pg_dump");
    let dump = std::process::Command::new(pg_dump)
        .arg(server.url(db))
        .output()
        .unwrap();
    assert!(dump.status.success(), "{dump:?}");
    String::from_utf8_lossy(&dump.stdout).into_owned()
}

/// On PostgreSQL: forgetting a source leaves none of its texts on the server (a `pg_dump`
/// after `VACUUM FULL`) nor in the forgetting host's cache files; `--deep` is clean.
#[test]
fn forgetting_a_source_on_postgres_leaves_no_text_on_the_server_or_in_the_cache() {
    use crate::pgserver::PgServer;
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database();
    let pmm = crate::harness::pg_host(&url);
    let cache = pmm.cache.clone().unwrap();
    for (text, source) in [
        (
            "guest whispers the quince password is rowan-77",
            "mcp:guest",
        ),
        ("owner notes the garden gate", "owner"),
        (
            "guest repeats the quince password is rowan-77 again",
            "mcp:guest",
        ),
    ] {
        let meta = json!({"role": "user", "source": source}).to_string();
        let r = pmm.run(
            "pmm-append",
            &["--kind", "user_message", "--content", text, "--meta", &meta],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
    let r = forget(
        &pmm,
        &[
            "--erase-source",
            "mcp:guest",
            "--with-quotes",
            "--reason",
            "guest data",
            "--source",
            "owner",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.of_type("erasure")[0]["erased"], json!([1, 3]), "{r:?}");
    let dump = dump_after_vacuum(&server, &url);
    // Contents are bytea: the dump writes them in hex.
    let hex = |t: &str| t.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    assert!(
        dump.contains(&hex("owner notes the garden gate")),
        "the dump has the ledger"
    );
    for needle in ["rowan-77".to_string(), hex("rowan-77")] {
        assert!(!dump.contains(&needle), "the server keeps no erased text");
    }
    for f in std::fs::read_dir(&cache).unwrap().flatten() {
        if f.path().is_file() {
            let bytes = std::fs::read(f.path()).unwrap();
            assert!(
                !bytes.windows(8).any(|w| w == b"rowan-77"),
                "{:?}",
                f.path()
            );
        }
    }
    deep_clean(&pmm);
}

/// Whether any file under `dir` holds `needle`'s bytes.
fn any_file_holds(dir: &std::path::Path, needle: &[u8]) -> Option<std::path::PathBuf> {
    for f in std::fs::read_dir(dir).unwrap().flatten() {
        let p = f.path();
        if p.is_dir() {
            if let Some(found) = any_file_holds(&p, needle) {
                return Some(found);
            }
        } else if let Ok(bytes) = std::fs::read(&p) {
            if bytes.windows(needle.len()).any(|w| w == needle) {
                return Some(p);
            }
        }
    }
    None
}

/// On PostgreSQL with two hosts: one host talks about the pets, the other reads it all (its
/// cache holds the texts), then the first forgets the concept with its quotes. No byte of the
/// texts is left on either host (caches, WALs) nor on the server (a `pg_dump` after `VACUUM
/// FULL`); a checkpoint signed before still checks; `--deep` is clean on both.
#[test]
fn forgetting_a_concept_on_postgres_leaves_no_text_on_any_host_or_the_server() {
    use crate::pgserver::PgServer;
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.database();
    let (a, b) = (crate::harness::pg_host(&url), crate::harness::pg_host(&url));
    let pets = conversation(&a);
    let r = b.run("pmm-recall", &["Biscuit slipper"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let needle = b"Biscuit chewed slipper";
    let cache_b = b.cache.clone().unwrap();
    assert!(
        any_file_holds(&cache_b, needle).is_some(),
        "host b read the texts"
    );
    let key = a.path("log.key");
    let key_s = key.to_str().unwrap();
    let r = a.run(
        "pmm-export",
        &["--keygen", "test.example/log", "--key", key_s],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let vkey = r.stdout.trim().to_string();
    let r = a.run("pmm-export", &["--checkpoint", "--key", key_s], "");
    let before = a.path("before.txt");
    std::fs::write(&before, &r.stdout).unwrap();
    let args = [
        "--erase-concept",
        "topic.pets",
        "--with-quotes",
        "--reason",
        "forget the dog",
    ];
    let r = forget(&a, &[&args[..], &["--source", "owner"]].concat());
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.of_type("erasure")[0]["erased"].as_array().unwrap().len() >= pets.len());
    // Host b catches up past the erasures (any read does).
    let r = b.run("pmm-replay", &["--kind", "erasure"], "");
    assert_eq!(r.code, 0, "{r:?}");
    for host in [&a, &b] {
        let cache = host.cache.clone().unwrap();
        assert_eq!(any_file_holds(&cache, needle), None, "a host's cache");
        deep_clean(host);
        let r = host.run(
            "pmm-verify",
            &["--checkpoint", before.to_str().unwrap(), "--key", &vkey],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
    let dump = dump_after_vacuum(&server, &url);
    let hex = |t: &[u8]| t.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert!(
        dump.contains(&hex(b"tomatoes in bed")),
        "the dump has the ledger"
    );
    assert!(
        !dump.contains(&hex(needle)),
        "the server keeps no erased text"
    );
    assert!(!dump.contains("Biscuit chewed slipper"), "nor as text");
}
