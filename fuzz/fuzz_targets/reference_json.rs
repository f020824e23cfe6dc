//! The reference JSON export reader (a JSON array of events, `meta` as a string: what the
//! Python reference exports and `pmm-export --format json` writes) over arbitrary bytes, plain
//! or gzipped.
//!
//! Checks: no panic; the array's events come back without line numbers; a JSON-level error
//! (bad syntax, a truncated array, trailing data) is one malformed item that carries a line
//! within the file and is the last item; see `common::check_read` for the rest. Plain input
//! that does not start with `[` belongs to the `jsonl` target and is skipped.

#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use pmm::interchange::{Format, Item};

fuzz_target!(|data: &[u8]| {
    if common::is_sqlite(data) {
        return;
    }
    let gz = common::is_gzip(data);
    if !gz && common::first_byte(data) != Some(b'[') {
        return;
    }
    let (result, items) = common::read_bytes("input.json", data, None);
    match result {
        Ok(Format::Json) => {}
        Ok(other) => {
            assert!(gz, "plain input starting with '[' read as {other:?}");
            return;
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert!(gz, "plain input starting with '[' refused: {e}");
            return;
        }
    }
    let lines = data.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    for (i, r) in items.iter().enumerate() {
        match &r.item {
            Item::Event(rec) => assert_eq!(rec.line, None),
            Item::Malformed { line: None, .. } => {}
            Item::Malformed {
                line: Some(line), ..
            } => {
                assert_eq!(i + 1, items.len(), "items after a JSON-level error");
                assert!(*line >= 1);
                if !gz {
                    assert!(*line <= lines, "line {line} of a {lines}-line input");
                }
            }
        }
    }
    common::check_read("input.json", data, &items);
});
