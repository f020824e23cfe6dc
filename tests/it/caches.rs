//! The ledger's derived tables are caches (issue 34, items 8 and 9): one dropped or emptied
//! by hand is rebuilt from the ledger by `pmm-recall --reindex` and by any writer, and a
//! reader reads a ledger where it may not make the `-wal` and `-shm` files, without leaving
//! files that lock the ledger's owner out.

use crate::harness::Pmm;
use pmm::store::{Indexes, Ledger};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};

/// Runs SQL on the ledger as another program (a person with `sqlite3`) would.
fn sql(pmm: &Pmm, sql: &str) {
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    conn.execute_batch(sql).unwrap();
}

/// The ids `pmm-recall TEXT` prints (exit 0 asserted).
fn recalled(pmm: &Pmm, text: &str) -> Vec<i64> {
    let r = pmm.run("pmm-recall", &[text], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
        .iter()
        .map(|v| v["id"].as_i64().unwrap())
        .collect()
}

/// `pmm-recall --check`'s exit code, with its output.
fn check(pmm: &Pmm) -> (i32, String) {
    let r = pmm.run("pmm-recall", &["--check"], "");
    (r.code, r.stdout)
}

fn append(pmm: &Pmm, content: &str) {
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", content],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
}

/// A few messages about kayaks and canoes.
fn small(pmm: &Pmm) {
    for t in [
        "Alice: the kayak is yellow",
        "Bob: my canoe is red",
        "Alice: we paddled the kayak at sunrise",
    ] {
        append(pmm, t);
    }
}

#[test]
fn a_dropped_text_index_on_a_big_ledger_is_rebuilt_by_reindex_and_by_any_writer() {
    let pmm = Pmm::new();
    let mut lines = String::with_capacity(100_001 * 80);
    lines.push_str(
        "{\"kind\":\"user_message\",\"content\":\"My grandmother's necklace came from Sweden.\"}\n",
    );
    for i in 0..100_000 {
        let kind = ["user_message", "assistant_message"][i % 2];
        lines.push_str(&format!(
            "{{\"kind\":\"{kind}\",\"content\":\"routine note {i} about the weather\"}}\n"
        ));
    }
    let r = pmm.run("pmm-append", &["--batch", "--quiet"], &lines);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(recalled(&pmm, "necklace")[0], 1);

    sql(&pmm, "DROP TABLE pmm_fts;");
    // A reader cannot index 100,001 events on the fly: it says what rebuilds the index.
    let r = pmm.run("pmm-recall", &["necklace"], "");
    r.assert_error("pmm-recall", &["--reindex", "any writer"]);
    let (code, out) = check(&pmm);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("pmm_fts") && out.contains("broken"), "{out}");
    let r = pmm.run("pmm-recall", &["--reindex"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["through"], 100_001);
    assert_eq!(recalled(&pmm, "necklace")[0], 1);
    assert_eq!(check(&pmm).0, 0);

    // Any writer rebuilds it too, in its own transaction.
    sql(&pmm, "DROP TABLE pmm_fts;");
    append(&pmm, "one more");
    assert_eq!(recalled(&pmm, "necklace")[0], 1);
    let (code, out) = check(&pmm);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_lost_index_state_row_is_rebuilt_not_reported_done() {
    let pmm = Pmm::new();
    small(&pmm);
    let before = recalled(&pmm, "kayak");
    sql(&pmm, "DELETE FROM pmm_fts_state;");
    assert_eq!(check(&pmm).0, 1);
    let r = pmm.run("pmm-recall", &["--reindex"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let (code, out) = check(&pmm);
    assert_eq!(code, 0, "--reindex left the index unchecked: {out}");
    assert_eq!(recalled(&pmm, "kayak"), before);

    sql(&pmm, "DELETE FROM pmm_fts_state;");
    append(&pmm, "Bob: the kayak club meets on Sunday");
    let (code, out) = check(&pmm);
    assert_eq!(
        code, 0,
        "a writer indexed over an index it had lost track of: {out}"
    );
    assert!(recalled(&pmm, "kayak").contains(&4));
}

#[test]
fn a_dropped_recallable_view_is_made_again() {
    let pmm = Pmm::new();
    small(&pmm);
    let before = recalled(&pmm, "kayak");
    sql(&pmm, "DROP VIEW pmm_recallable;");
    // A reader does without the index whose content it is (it indexes in memory).
    assert_eq!(recalled(&pmm, "kayak"), before);
    let (code, out) = check(&pmm);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("pmm_recallable is missing"), "{out}");
    let r = pmm.run("pmm-recall", &["--reindex"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["events"], 3);
    assert_eq!(check(&pmm).0, 0);
    sql(&pmm, "DROP VIEW pmm_recallable;");
    append(&pmm, "Bob: a kayak for two");
    assert_eq!(check(&pmm).0, 0);
    assert!(recalled(&pmm, "kayak").contains(&4));
}

/// How many leaves the stored Merkle tree holds.
fn stored_leaves(pmm: &Pmm) -> i64 {
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    conn.query_row("SELECT count(*) FROM pmm_merkle WHERE level = 0", [], |r| {
        r.get(0)
    })
    .unwrap()
}

#[test]
fn a_dropped_merkle_table_is_rebuilt_by_any_writer() {
    let pmm = Pmm::new();
    small(&pmm);
    sql(&pmm, "DROP TABLE pmm_merkle;");
    append(&pmm, "after the drop");
    assert_eq!(stored_leaves(&pmm), 4);
    assert_eq!(check(&pmm).0, 0);
    sql(&pmm, "DELETE FROM pmm_merkle_state;");
    append(&pmm, "after the state row went");
    assert_eq!(stored_leaves(&pmm), 5);
    let (code, out) = check(&pmm);
    assert_eq!(code, 0, "{out}");
    sql(&pmm, "DROP TABLE pmm_merkle_state;");
    let r = pmm.run("pmm-verify", &["--rebuild-tree"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["size"], 5);
    assert_eq!(check(&pmm).0, 0);
}

#[test]
fn a_dropped_vector_table_is_made_again_empty_and_the_others_kept() {
    let pmm = Pmm::new();
    small(&pmm);
    let put = |name: &str, v: &[(i64, Vec<f32>)]| {
        let mut l = Ledger::open_writer(&pmm.db, 1000).unwrap();
        l.put_vectors(name, 2, v).unwrap();
    };
    let models = || {
        let l = Ledger::open_reader(&pmm.db).unwrap();
        l.vector_models().unwrap()
    };
    let two = vec![(1, vec![1.0, 0.0]), (2, vec![0.0, 1.0])];
    put("m", &two);
    assert_eq!(models(), [("m".to_string(), 2, 2)]);

    // The vectors themselves: made again empty, the model kept, for --embed to refill.
    sql(&pmm, "DROP TABLE pmm_vectors;");
    append(&pmm, "Bob: a writer after the drop");
    assert_eq!(models(), [("m".to_string(), 2, 0)]);
    let l = Ledger::open_reader(&pmm.db).unwrap();
    assert_eq!(l.missing_vector_count("m").unwrap(), 4);
    drop(l);
    assert_eq!(check(&pmm).0, 0);

    // The models' names: the vectors are kept under a model of their own, never mixed with
    // one registered later.
    put("m", &two);
    sql(&pmm, "DROP TABLE pmm_embed_models;");
    append(&pmm, "Bob: another writer");
    assert_eq!(
        models(),
        [("unnamed-1".to_string(), 2, 2)],
        "{:?}",
        models()
    );
    put("n", &[(1, vec![1.0, 0.0])]);
    assert_eq!(
        models(),
        [("n".to_string(), 2, 1), ("unnamed-1".to_string(), 2, 2)]
    );

    // The packs: rebuilt from the stored vectors.
    sql(&pmm, "DROP TABLE pmm_vector_pack;");
    append(&pmm, "Bob: a third writer");
    assert_eq!(
        models(),
        [("n".to_string(), 2, 1), ("unnamed-1".to_string(), 2, 2)]
    );
    let l = Ledger::open_reader(&pmm.db).unwrap();
    let hits = l
        .vector_search("unnamed-1", &[0.0, 1.0], i64::MAX, 5)
        .unwrap();
    assert_eq!(hits[0].0, 2);
    drop(l);
    assert_eq!(check(&pmm).0, 0);
}

#[test]
fn a_dropped_checkpoint_table_is_made_again() {
    let pmm = Pmm::new();
    small(&pmm);
    sql(&pmm, "DROP TABLE pmm_checkpoints;");
    let (code, out) = check(&pmm);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("pmm_checkpoints"), "{out}");
    append(&pmm, "after the drop");
    let l = Ledger::open_reader(&pmm.db).unwrap();
    assert!(l.has_checkpoint_table().unwrap());
    drop(l);
    assert_eq!(check(&pmm).0, 0);
    let r = pmm.run("pmm-replay", &["--state"], "");
    assert_eq!(r.code, 0, "{r:?}");
}

/// Runs program `name` with `args` as user `uid` (through `setpriv`), in `pmm`'s workspace:
/// exit code, stdout, stderr.
fn as_user(pmm: &Pmm, uid: u32, name: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(assert_cmd::cargo::cargo_bin(name))
        .args(args)
        .current_dir(pmm.dir.path())
        .env_remove("RUST_BACKTRACE")
        .env("PMM_DB", &pmm.db)
        .env("HOME", pmm.dir.path())
        .env("PMM_NOW", "2025-11-24T05:55:41.194157Z")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether these tests can run programs as other users (as root, with `setpriv`).
fn can_switch_users(why: &str) -> bool {
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    let ok = root
        && Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(assert_cmd::cargo::cargo_bin("pmm-replay"))
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    crate::harness::present_or_skip(ok, "root and setpriv (util-linux)", why)
}

/// The files beside the ledger in its directory.
fn companions(pmm: &Pmm) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(pmm.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ledger.db-"))
        .collect();
    v.sort();
    v
}

const NOBODY: u32 = 65534;
const OTHER: u32 = 4242;

#[test]
fn a_reader_reads_a_ledger_in_a_directory_it_cannot_write() {
    if !can_switch_users("the read-only directory test") {
        return;
    }
    let pmm = Pmm::new();
    small(&pmm);
    // The ledger is nobody's, in a directory only root may write.
    std::os::unix::fs::chown(&pmm.db, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(pmm.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(companions(&pmm).is_empty());
    for (prog, args) in [
        ("pmm-replay", &[][..]),
        ("pmm-recall", &["kayak"][..]),
        ("pmm-verify", &[][..]),
        ("pmm-export", &[][..]),
        ("pmm-metrics", &[][..]),
        ("pmm-graph", &["stats"][..]),
        ("pmm-mcp", &["--read-only", "--quiet"][..]),
    ] {
        let (code, out, err) = as_user(&pmm, NOBODY, prog, args);
        assert_eq!(code, 0, "{prog} {args:?}: {err}");
        if prog == "pmm-replay" {
            assert_eq!(out.lines().count(), 3);
        }
    }
    assert!(companions(&pmm).is_empty(), "{:?}", companions(&pmm));

    // A writer has the ledger open: a reader reads its -wal through the -shm it cannot write.
    let held = rusqlite::Connection::open(&pmm.db).unwrap();
    held.query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))
        .unwrap();
    append(&pmm, "Carol: a kayak in the wal");
    let (code, out, err) = as_user(&pmm, NOBODY, "pmm-replay", &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 4);
    let (code, out, err) = as_user(&pmm, NOBODY, "pmm-recall", &["kayak"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("in the wal"), "{out}");
    drop(held);

    // FTS5's check is a write: refused, saying why.
    let (code, _, err) = as_user(&pmm, NOBODY, "pmm-recall", &["--check"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot read the ledger here") && err.contains("cannot write its directory"),
        "{err}"
    );
}

#[test]
fn another_users_reader_in_a_sticky_directory_leaves_nothing_that_locks_the_owner_out() {
    if !can_switch_users("the sticky directory test") {
        return;
    }
    let pmm = Pmm::new();
    std::fs::set_permissions(pmm.dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let owner = |args: &[&str]| as_user(&pmm, NOBODY, "pmm-append", args);
    let (code, _, err) = owner(&["--kind", "user_message", "--content", "a"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::metadata(&pmm.db).unwrap().uid(), NOBODY);
    for (prog, args) in [
        ("pmm-replay", &["--state"][..]),
        ("pmm-recall", &["a"][..]),
        ("pmm-verify", &[][..]),
    ] {
        let (code, _, err) = as_user(&pmm, OTHER, prog, args);
        assert_eq!(code, 0, "{prog}: {err}");
    }
    assert!(companions(&pmm).is_empty(), "{:?}", companions(&pmm));
    let (code, _, err) = owner(&["--kind", "user_message", "--content", "b"]);
    assert_eq!(code, 0, "the owner is locked out: {err}");

    // Files another user's program left (an older pmm, sqlite3): the owner's writer says
    // whose they are and what to do.
    for name in ["ledger.db-wal", "ledger.db-shm"] {
        let p = pmm.path(name);
        std::fs::write(&p, b"").unwrap();
        std::os::unix::fs::chown(&p, Some(OTHER), Some(OTHER)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let (code, _, err) = owner(&["--kind", "user_message", "--content", "c"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("belongs to user 4242") && err.contains("remove it"),
        "{err}"
    );
}
