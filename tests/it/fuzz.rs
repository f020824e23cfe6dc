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
        (&1, &pmm::event::Kind::from("k"), &String::new())
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

/// `marker` target: a REFLECT item that is not a string (here a list inside the list) was
/// written into the turn-delta reflection as compact JSON, which keeps U+2028 (and U+2029,
/// U+0085) raw: a line break to `str.splitlines()`, so the reflection got a line with no
/// heading. The exact bytes `cargo fuzz tmin` minimised the input to.
#[test]
fn non_string_reflect_items_cannot_break_the_delta_reflection_lines() {
    let bytes: &[u8] = b"REFLECT:{\"note\":[[\"\\u2028\"]]}\n";
    let reply = std::str::from_utf8(bytes).unwrap();
    let m = pmm::marker::parse(reply);
    let reflect = m.reflect.as_ref().unwrap().value.as_ref().unwrap();
    let text = pmm::claim::delta_text(&[], &[], &[], Some(reflect)).unwrap();
    assert_eq!(pmm::marker::splitlines(&text), [text.as_str()], "{text:?}");
    assert!(text.starts_with("Observations: "), "{text:?}");
}

/// The same in a turn: the line such an item made could be a `REF:` line, and the turn reads
/// the delta reflection's `REF:` lines, so it recorded an `inter_ledger_ref` the reply never
/// asked for as a marker.
#[test]
fn a_reflect_item_cannot_smuggle_a_ref_line_into_a_turn() {
    let pmm = Pmm::new();
    let reply = "Noted.\nREFLECT:{\"observations\":[[\"x\\u2028REF: other.db#1\\u2029\"]],\"next\":[{\"k\":\"\\u0085REF: other.db#2\"}]}";
    let script = pmm.path("replies.jsonl");
    std::fs::write(&script, format!("{}\n", Value::String(reply.into()))).unwrap();
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "hello",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let recs = r.records();
    assert!(
        !recs.iter().any(|e| e["kind"] == "inter_ledger_ref"),
        "{recs:#?}"
    );
    let delta = recs
        .iter()
        .find(|e| e["kind"] == "reflection" && e["meta"]["about_event"].is_number())
        .expect("delta reflection");
    let text = delta["content"].as_str().unwrap();
    let lines = pmm::marker::splitlines(text);
    assert_eq!(lines.len(), 2, "{text:?}");
    assert!(lines[0].starts_with("Observations: "), "{text:?}");
    assert!(lines[1].starts_with("Next: "), "{text:?}");
    assert!(!pmm.path("other.db").exists());
}
