//! Numeric flags out of range (issue 13, items 8, 14, 15, 16): every one is a one-line exit 2
//! that names the flag, never a panic (exit 101), an "unexpected argument", or a write.

use crate::harness::Pmm;

/// Runs `tool args` and asserts a one-line usage error naming `flag`, and that the ledger did
/// not change.
fn refused(pmm: &Pmm, tool: &str, args: &[&str], flag: &str) {
    let before = pmm.count();
    let r = pmm.run(tool, args, "");
    r.assert_error(tool, &[flag]);
    assert!(!r.stderr.contains("panicked"), "{r:?}");
    assert!(!r.stderr.contains("unexpected argument"), "{r:?}");
    assert_eq!(pmm.count(), before, "{tool} {args:?} wrote events");
}

#[test]
fn issue13_item8_busy_timeout_beyond_sqlite_int_is_exit_2_not_a_panic() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let big = "2147483648";
    refused(
        &pmm,
        "pmm-append",
        &[
            "--busy-timeout",
            big,
            "--kind",
            "user_message",
            "--content",
            "x",
        ],
        "--busy-timeout",
    );
    refused(
        &pmm,
        "pmm-turn",
        &["--busy-timeout", big, "hi"],
        "--busy-timeout",
    );
    refused(&pmm, "pmm-tick", &["--busy-timeout", big], "--busy-timeout");
    refused(
        &pmm,
        "pmm-metrics",
        &["--append", "--busy-timeout", big],
        "--busy-timeout",
    );
    refused(
        &pmm,
        "pmm-append",
        &["--busy-timeout", "-1", "--kind", "user_message"],
        "--busy-timeout",
    );
    // The largest value SQLite takes still works.
    let r = pmm.run(
        "pmm-append",
        &["--busy-timeout", "2147483647", "--kind", "user_message"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn issue13_item8_turn_timeout_too_large_is_exit_2_not_a_panic() {
    let pmm = Pmm::new();
    pmm.seed(1);
    for t in ["1e20", "inf", "NaN", "0", "-5", "86401"] {
        refused(&pmm, "pmm-turn", &["--timeout", t, "hi"], "--timeout");
    }
    let r = pmm.run(
        "pmm-turn",
        &["--adapter", "dummy", "--timeout", "86400", "hi"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn issue13_item14_temperature_and_top_p_must_be_finite() {
    let pmm = Pmm::new();
    pmm.seed(1);
    for v in ["NaN", "inf", "-inf", "-0.5"] {
        refused(
            &pmm,
            "pmm-turn",
            &["--temperature", v, "hi"],
            "--temperature",
        );
    }
    for v in ["NaN", "inf", "1.5", "-0.1"] {
        refused(&pmm, "pmm-turn", &["--top-p", v, "hi"], "--top-p");
    }
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "dummy",
            "--temperature",
            "0.7",
            "--top-p",
            "0.9",
            "hi",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn issue13_item15_rust_backtrace_does_not_lengthen_an_error() {
    let pmm = Pmm::new();
    pmm.seed(3);
    for setting in ["1", "full", "0"] {
        let out = pmm
            .cmd("pmm-replay")
            .args(["--state", "--at", "99"])
            .env("RUST_BACKTRACE", setting)
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "RUST_BACKTRACE={setting}: {stderr:?}"
        );
        assert!(stderr.starts_with("pmm-replay: error: --at"), "{stderr}");
    }
}

#[test]
fn issue13_item16_negative_numbers_reach_the_range_check() {
    let pmm = Pmm::new();
    pmm.seed(4);
    refused(&pmm, "pmm-replay", &["--tail", "-1"], "--tail");
    refused(&pmm, "pmm-replay", &["--since", "-3"], "--since");
    refused(&pmm, "pmm-replay", &["--until", "-3"], "--until");
    refused(&pmm, "pmm-replay", &["--state", "--at", "-1"], "--at");
    refused(&pmm, "pmm-replay", &["--state", "--at", "0"], "--at");
    refused(&pmm, "pmm-replay", &["--diff", "-1", "2"], "--diff");
    refused(&pmm, "pmm-export", &["--since", "-1"], "--since");
    refused(&pmm, "pmm-export", &["--until", "-2"], "--until");
    refused(&pmm, "pmm-tick", &["--slot", "-1"], "--slot");
    refused(&pmm, "pmm-tick", &["--interval", "-5"], "--interval");
    refused(&pmm, "pmm-tick", &["--every", "-1"], "--every");
    refused(&pmm, "pmm-graph", &["neighbors", "-1"], "<ID>");
    refused(&pmm, "pmm-turn", &["--retries", "-1", "hi"], "--retries");
    refused(
        &pmm,
        "pmm-turn",
        &["--max-tokens", "-1", "hi"],
        "--max-tokens",
    );
    refused(&pmm, "pmm-turn", &["--seed", "-1", "hi"], "--seed");
    // In range still works: slot 0 and --tail 0.
    let r = pmm.run("pmm-replay", &["--tail", "0"], "");
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{r:?}");
    let r = pmm.run("pmm-tick", &["--slot", "0"], "");
    assert_eq!(r.code, 0, "{r:?}");
}
