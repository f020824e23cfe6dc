//! Inputs the fuzz targets found (see `fuzz/` and docs/fuzzing.md), each kept as the exact
//! bytes the fuzzer minimised it to, with the behaviour that is right for it.

use crate::harness::Pmm;
use pmm::interchange::{self, Format, Input, Item};
use serde_json::Value;

/// Reads `bytes` (written to a file) with the public reader, as `pmm-verify FILE` does.
fn read(bytes: &[u8]) -> (pmm::Result<Format>, Vec<Item>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input");
    std::fs::write(&path, bytes).unwrap();
    let mut items = Vec::new();
    let result = interchange::read(&Input::new(&path), &|_| {}, &mut |item| {
        items.push(item);
        Ok(true)
    });
    (result, items)
}

/// `reference_json` target: a reference-JSON event whose `meta` string holds a line break
/// (JSON white space, as a pretty-printed meta has) was exported to JSON Lines with the break
/// in it, splitting the event over two lines that read back as two malformed records.
#[test]
fn jsonl_export_of_a_meta_with_line_breaks_stays_one_line() {
    let bytes: &[u8] =
        b"[\n  {\"id\": 1, \"ts\": \"t\", \"kind\": \"k\",\"content\": \"\", \"meta\": \"{\\n}\"}";
    let (result, items) = read(bytes);
    assert_eq!(result.unwrap(), Format::Json);
    // The event, then the truncated array.
    assert_eq!(items.len(), 2, "{items:?}");
    let Item::Event(rec) = &items[0] else {
        panic!("{:?}", items[0])
    };
    assert_eq!(
        rec.event.meta, "{\n}",
        "the stored meta text is kept verbatim"
    );
    assert!(matches!(&items[1], Item::Malformed { line: Some(2), .. }));

    let line = rec.event.to_jsonl();
    assert!(!line.contains(['\n', '\r']), "{line:?}");
    let (result, back) = read(format!("{line}\n").as_bytes());
    assert_eq!(result.unwrap(), Format::Jsonl);
    assert_eq!(back.len(), 1, "{back:?}");
    let Item::Event(again) = &back[0] else {
        panic!("{:?}", back[0])
    };
    assert_eq!(again.event.meta, "{}");
    assert_eq!(again.line, Some(1));
    assert_eq!(
        (&again.event.id, &again.event.kind, &again.event.content),
        (&1, &"k".to_string(), &String::new())
    );
}

/// The same through the programs: a ledger imported from a reference export whose metas are
/// pretty-printed (`\n` and `\r\n` between the tokens) exports to JSON Lines that verifies, one
/// event per line, with the ledger's hashes.
#[test]
fn pretty_printed_metas_survive_import_and_jsonl_export() {
    let src = Pmm::new();
    src.seed(4);
    let r = src.run("pmm-export", &["--format", "json"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let mut events: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    for (i, ev) in events.iter_mut().enumerate() {
        let meta: Value = serde_json::from_str(ev["meta"].as_str().unwrap()).unwrap();
        let pretty = serde_json::to_string_pretty(&meta).unwrap();
        ev["meta"] = Value::String(if i % 2 == 0 {
            pretty
        } else {
            pretty.replace('\n', "\r\n")
        });
    }
    let dst = Pmm::new();
    let export = dst.path("pretty.json");
    std::fs::write(&export, serde_json::to_string_pretty(&events).unwrap()).unwrap();
    let r = dst.run("pmm-append", &["--import", export.to_str().unwrap()], "");
    assert_eq!(r.code, 0, "{r:?}");

    let r = dst.run("pmm-export", &["--format", "jsonl"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout.lines().count(), events.len(), "{}", r.stdout);
    assert!(!r.stdout.contains('\r'));
    let jsonl = dst.path("out.jsonl");
    std::fs::write(&jsonl, &r.stdout).unwrap();
    let v = dst.run("pmm-verify", &[jsonl.to_str().unwrap()], "");
    assert_eq!(v.code, 0, "{v:?}");
    let summary = v.summary();
    assert_eq!(summary["ok"], true);
    assert_eq!(summary["events"], events.len() as u64);
    assert_eq!(summary["last_hash"], events.last().unwrap()["hash"]);
}
