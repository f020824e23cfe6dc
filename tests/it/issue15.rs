//! Issue 15 items 4-8: mistakes that need not be permanent (preflight, no adapter, empty
//! messages), honest replies (truncation, Markdown), echoed instructions, the key never
//! stored, and hints in errors. Every server is a stub on 127.0.0.1.

use crate::harness::Pmm;
use crate::stub::{Preflight, Stub, StubResponse};
use serde_json::Value;

fn kinds(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_string))
        .collect()
}

fn turn_record(records: &[Value]) -> Value {
    records
        .iter()
        .find(|r| r["type"] == "turn")
        .cloned()
        .expect("turn record")
}

#[test]
fn issue15_item4_no_adapter_is_exit_2_with_how_to_pick_one_and_writes_nothing() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm-turn", &["hello"], "");
    r.assert_error("pmm-turn", &["--adapter", "PMM_ADAPTER", "dummy", "ollama"]);
    assert!(!pmm.db.exists(), "nothing may be created");
    // Stdin and chat are refused the same way.
    let r = pmm.run("pmm-turn", &["--plain"], "hello\n");
    r.assert_error("pmm-turn", &["--adapter"]);
    assert!(!pmm.db.exists());
    // dummy stays available by name, from the flag, the environment or .env.
    let r = pmm.run("pmm-turn", &["--adapter", "dummy", "hello"], "");
    assert_eq!(r.code, 0, "{r:?}");
    std::fs::write(pmm.path(".env"), "PMM_ADAPTER=dummy\n").unwrap();
    let r = pmm.run("pmm-turn", &["--text", "again"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("Echo: again"), "{r:?}");
}

#[test]
fn issue15_item4_an_empty_message_is_exit_2() {
    let pmm = Pmm::new();
    for text in ["", "   ", " \t\n "] {
        let r = pmm.run("pmm-turn", &["--adapter", "dummy", text], "");
        r.assert_error("pmm-turn", &["empty"]);
        assert!(!pmm.db.exists(), "{text:?} created the ledger");
    }
    let r = pmm.run("pmm-turn", &["--adapter", "dummy"], "{\"content\":\"  \"}\n");
    r.assert_error("pmm-turn", &["<stdin>:1", "empty"]);
    let r = pmm.run(
        "pmm-turn",
        &["--adapter", "dummy", "--plain", "--text"],
        "one\n\t \n",
    );
    // A whitespace-only plain line is a blank line: skipped, as before.
    assert_eq!(r.code, 0, "{r:?}");
}
