//! What the two reader targets share: reading bytes through the public reader
//! (`pmm::interchange::read_with`, with the verifier's `digest` work function, as
//! `pmm-verify` and `pmm-append` call it) and the properties every read must have.

use pmm::chain::Digest;
use pmm::event::Event;
use pmm::interchange::{self, Format, Input, Item, JsonArrayWriter};
use std::path::PathBuf;
use std::sync::OnceLock;

/// One item as read, with the digest the work function computed for it.
#[derive(Debug)]
pub struct Read {
    pub item: Item,
    pub digest: Option<Result<Digest, String>>,
}

/// Where inputs are written: a RAM disk when there is one. Files, not a directory: each is
/// removed right after it is read, since libFuzzer ends the process without running
/// destructors (a `TempDir` would be left behind by every run).
fn path(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        if shm.is_dir() {
            shm.into()
        } else {
            std::env::temp_dir()
        }
    });
    dir.join(format!("pmm-fuzz-{}-{name}", std::process::id()))
}

/// Writes `data` to a file and reads it as `pmm-verify FILE` would, stopping after `stop_after`
/// items when given.
pub fn read_bytes(
    name: &str,
    data: &[u8],
    stop_after: Option<usize>,
) -> (pmm::Result<Format>, Vec<Read>) {
    let path = path(name);
    std::fs::write(&path, data).unwrap();
    let mut items = Vec::new();
    let result = interchange::read_with(
        &Input::new(&path),
        &|_| {},
        &interchange::digest,
        &mut |item, digest| {
            items.push(Read { item, digest });
            Ok(stop_after.is_none_or(|n| items.len() < n))
        },
    );
    let _ = std::fs::remove_file(&path);
    (result, items)
}

/// True if `data` is a SQLite file to the reader (not what these targets are about).
pub fn is_sqlite(data: &[u8]) -> bool {
    data.starts_with(b"SQLite format 3\0")
}

/// True if `data` is gzipped to the reader.
pub fn is_gzip(data: &[u8]) -> bool {
    data.starts_with(&[0x1f, 0x8b])
}

/// The first byte after leading ASCII white space.
pub fn first_byte(data: &[u8]) -> Option<u8> {
    data.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// Properties of any read: events carry a digest (their meta was checked by the reader, so it
/// always has one) and malformed items none; a read that stops after the first item saw the
/// same first item; every event survives both export formats.
pub fn check_read(name: &str, data: &[u8], items: &[Read]) {
    for r in items {
        match (&r.item, &r.digest) {
            (Item::Event(rec), Some(Ok(_))) => {
                assert!(rec.meta.is_none(), "digest keeps the parsed meta");
            }
            (Item::Event(rec), d) => panic!("event {} without a digest: {d:?}", rec.event.id),
            (Item::Malformed { error, .. }, None) => assert!(!error.is_empty()),
            (Item::Malformed { .. }, Some(d)) => panic!("malformed item with a digest: {d:?}"),
        }
    }
    if let Some(first) = items.first() {
        let (_, again) = read_bytes(name, data, Some(1));
        assert_eq!(
            again.len(),
            1,
            "a read stopped after one item saw {}",
            again.len()
        );
        assert_eq!(
            format!("{:?}", again[0].item),
            format!("{:?}", first.item),
            "a stopped read saw another first item"
        );
    }
    let events: Vec<(&Event, &Digest)> = items
        .iter()
        .filter_map(|r| match (&r.item, &r.digest) {
            (Item::Event(rec), Some(Ok(d))) => Some((&rec.event, d)),
            _ => None,
        })
        .collect();
    if events.is_empty() {
        return;
    }

    // JSON Lines export (pmm-export --format jsonl): every event reads back as one line, with
    // the same fields and the same digest (the meta text may become canonical).
    let mut jsonl = Vec::new();
    for (ev, _) in &events {
        ev.write_jsonl(&mut jsonl);
        jsonl.push(b'\n');
    }
    let (result, back) = read_bytes("roundtrip.jsonl", &jsonl, None);
    assert!(
        matches!(result, Ok(Format::Jsonl)),
        "JSONL export does not read back: {result:?}\n{}",
        String::from_utf8_lossy(&jsonl)
    );
    assert_eq!(
        back.len(),
        events.len(),
        "JSONL export of {} events reads back as {} items: {back:?}\n{}",
        events.len(),
        back.len(),
        String::from_utf8_lossy(&jsonl)
    );
    for (i, ((ev, d), r)) in events.iter().zip(&back).enumerate() {
        let Item::Event(rec) = &r.item else {
            panic!(
                "JSONL export line {} reads back as {:?}\n{ev:?}",
                i + 1,
                r.item
            )
        };
        assert_eq!(rec.line, Some(i as u64 + 1));
        let got = &rec.event;
        assert_eq!(
            (
                &got.id,
                &got.ts,
                &got.kind,
                &got.content,
                &got.prev_hash,
                &got.hash
            ),
            (
                &ev.id,
                &ev.ts,
                &ev.kind,
                &ev.content,
                &ev.prev_hash,
                &ev.hash
            )
        );
        assert_eq!(r.digest.as_ref().unwrap().as_ref().unwrap(), *d);
    }

    // Reference JSON export (pmm-export --format json): every event reads back verbatim.
    let mut w = JsonArrayWriter::new(Vec::new()).unwrap();
    for (ev, _) in &events {
        w.write(ev).unwrap();
    }
    let json = w.finish().unwrap();
    let (result, back) = read_bytes("roundtrip.json", &json, None);
    assert!(
        matches!(result, Ok(Format::Json)),
        "JSON export does not read back: {result:?}"
    );
    assert_eq!(
        back.len(),
        events.len(),
        "JSON export reads back as {back:?}"
    );
    for ((ev, d), r) in events.iter().zip(&back) {
        let Item::Event(rec) = &r.item else {
            panic!("JSON export reads back as {:?}\n{ev:?}", r.item)
        };
        assert_eq!(&rec.event, *ev);
        assert_eq!(r.digest.as_ref().unwrap().as_ref().unwrap(), *d);
    }
}
