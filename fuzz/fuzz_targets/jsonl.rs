//! The JSON Lines event reader (what `pmm-append` and `pmm-verify` read; `pmm-export
//! --format jsonl` output) over arbitrary bytes, plain or gzipped.
//!
//! Checks: no panic (the reader runs its parsing on worker threads; a panic there aborts too);
//! input that is not a ledger is an error, anything else yields items; every item carries the
//! line it is on, 1-based, rising, within the file; see `common::check_read` for the rest.
//! Inputs the other targets own are skipped: a reference JSON array (`[` first) and SQLite.

#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use pmm::interchange::{Format, Item};

fuzz_target!(|data: &[u8]| {
    if common::is_sqlite(data) || common::first_byte(data) == Some(b'[') {
        return;
    }
    let (result, items) = common::read_bytes("input.jsonl", data, None);
    let gz = common::is_gzip(data);
    match result {
        Ok(Format::Jsonl) => {}
        Ok(other) => {
            assert!(gz, "plain input not starting with '[' read as {other:?}");
            return;
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            if !gz {
                // Only input that is not JSON Lines at all is refused outright.
                assert!(
                    common::first_byte(data).is_some_and(|b| b != b'{'),
                    "plain input starting with '{{' refused: {e}"
                );
                assert!(items.is_empty());
            }
            return;
        }
    }
    let lines = data.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    let mut last = 0;
    for r in &items {
        let line = match &r.item {
            Item::Event(rec) => rec.line,
            Item::Malformed { line, .. } => *line,
        };
        let line = line.expect("a JSONL item without a line number");
        assert!(line > last, "line {line} after line {last}");
        if !gz {
            assert!(line <= lines, "line {line} of a {lines}-line input");
        }
        last = line;
    }
    common::check_read("input.jsonl", data, &items);
});
