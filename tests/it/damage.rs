//! A damaged SQLite file (issue 13, item 6): SQLite's own check is a finding of
//! `pmm-verify`, and writers refuse a ledger whose head is below ids it has already written.

use crate::harness::Pmm;

const PAGE: usize = 4096;

/// A ledger of `n` user messages of about 200 bytes: many leaf pages under interior ones.
fn ledger(n: usize) -> Pmm {
    let pmm = Pmm::new();
    let mut lines = String::new();
    for i in 0..n {
        lines.push_str(&format!(
            "{{\"kind\":\"user_message\",\"content\":\"event {i} {}\",\"meta\":{{\"role\":\"user\"}}}}\n",
            "x".repeat(200)
        ));
    }
    let r = pmm.run("pmm-append", &["--batch", "--quiet"], &lines);
    assert_eq!(r.code, 0, "{r:?}");
    // Everything in the main file, so that editing its bytes is editing the ledger.
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    let size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    assert_eq!(size as usize, PAGE);
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    pmm
}

fn root_page(pmm: &Pmm, name: &str) -> usize {
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    let n: i64 = conn
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE name = ?1",
            [name],
            |r| r.get(0),
        )
        .unwrap();
    n as usize
}

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_be_bytes([b[at], b[at + 1]]) as usize
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Byte offset of page `n` (1-based); page 1 starts with the 100-byte file header.
fn page_at(n: usize) -> usize {
    (n - 1) * PAGE
}

fn edit(pmm: &Pmm, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(&pmm.db).unwrap();
    f(&mut bytes);
    std::fs::write(&pmm.db, bytes).unwrap();
}

fn damage(r: &crate::harness::Run) -> Vec<String> {
    r.of_type("finding")
        .into_iter()
        .filter(|f| f["problem"] == "sqlite_damage")
        .map(|f| f["error"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn issue13_item6_interior_page_damage_is_a_finding_and_writers_refuse() {
    let pmm = ledger(600);
    let root = root_page(&pmm, "events");
    // The events table's root is an interior page (type 5): point its right-most child at
    // the page before, so the newest leaf — the highest ids — is unreachable.
    edit(&pmm, |b| {
        let p = page_at(root);
        assert_eq!(b[p], 5, "the events root is an interior table page");
        let cells = u16_at(b, p + 3);
        let last_cell = u16_at(b, p + 12 + 2 * (cells - 1));
        let left = u32_at(b, p + last_cell);
        b[p + 8..p + 12].copy_from_slice(&left.to_be_bytes());
    });

    let r = pmm.run("pmm-verify", &["--quiet"], "");
    assert_eq!(r.code, 1, "{r:?}");
    let found = damage(&r);
    assert!(
        found
            .iter()
            .any(|e| e.contains("sqlite_sequence records id 600")),
        "{found:?}"
    );
    assert!(found.len() >= 2, "quick_check reports too: {found:?}");
    assert_eq!(r.summary()["sqlite_damage"], found.len() as u64);
    assert_eq!(r.summary()["ok"], false);

    // Writers refuse instead of reusing ids that the hidden page holds.
    let before = std::fs::read(&pmm.db).unwrap();
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "new"],
        "",
    );
    r.assert_error("pmm-append", &["damaged", "sqlite_sequence", "600"]);
    let r = pmm.run("pmm-turn", &["--adapter", "dummy", "hi"], "");
    r.assert_error("pmm-turn", &["damaged"]);
    let r = pmm.run("pmm-tick", &[], "");
    r.assert_error("pmm-tick", &["damaged"]);
    let r = pmm.run(
        "pmm-append",
        &[],
        "{\"kind\":\"user_message\",\"content\":\"x\"}\n",
    );
    r.assert_error("pmm-append", &["damaged"]);
    assert!(std::fs::read(&pmm.db).unwrap() == before, "nothing written");
}

#[test]
fn issue13_item6_index_page_damage_is_a_finding() {
    // A flipped byte inside an index entry: the chain walk never reads the index, and
    // quick_check does not compare an index with its table; --integrity does.
    let pmm = ledger(300);
    let root = root_page(&pmm, "idx_kind");
    edit(&pmm, |b| {
        let mut p = page_at(root);
        if b[p] == 2 {
            // Interior index page: go down its first child.
            let cell = u16_at(b, p + 12);
            p = page_at(u32_at(b, p + cell) as usize);
        }
        assert_eq!(b[p], 10, "an index leaf page");
        let cell = u16_at(b, p + 8 + 2 * 5);
        let at = p
            + cell
            + b[p + cell..p + cell + 40]
                .windows(12)
                .position(|w| w == b"user_message")
                .expect("a kind in the entry");
        b[at + 5] ^= 1;
    });
    let r = pmm.run("pmm-verify", &["--quiet", "--integrity"], "");
    assert_eq!(r.code, 1, "{r:?}");
    let found = damage(&r);
    assert!(
        found
            .iter()
            .any(|e| e.contains("missing from index idx_kind")),
        "{found:?}"
    );
    assert!(r
        .of_type("finding")
        .iter()
        .all(|f| f["check"] == "integrity_check"));

    // A flipped byte in an index page's header is page damage: quick_check, the default,
    // finds it.
    let pmm = ledger(300);
    let root = root_page(&pmm, "idx_events_id_desc");
    edit(&pmm, |b| {
        let p = page_at(root);
        // The number of cells on the page.
        b[p + 4] ^= 0x40;
    });
    let r = pmm.run("pmm-verify", &["--quiet"], "");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(!damage(&r).is_empty(), "{r:?}");
    assert!(r
        .of_type("finding")
        .iter()
        .all(|f| f["check"] == "quick_check"));

    // A clean ledger: no finding, either way.
    let clean = ledger(50);
    for args in [&["--quiet"][..], &["--quiet", "--integrity"]] {
        let r = clean.run("pmm-verify", args, "");
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.summary()["sqlite_damage"], 0);
    }
}
