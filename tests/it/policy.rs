//! The write policy (SPEC §2.5): sensitive kinds, the reference default, custom policies,
//! fail-closed on an unreadable policy, and violation events in the reference format.

use crate::harness::{Pmm, Run};
use serde_json::{json, Value};

/// The ledger's events as exported (meta as an object).
fn events(pmm: &Pmm) -> Vec<Value> {
    let r = pmm.run("pmm-export", &["--format", "jsonl"], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
}

/// Appends one event with `pmm-append --kind --content --meta`.
fn append(pmm: &Pmm, kind: &str, content: &str, meta: &str) -> Run {
    pmm.run(
        "pmm-append",
        &["--kind", kind, "--content", content, "--meta", meta],
        "",
    )
}

/// Asserts a policy refusal: exit 1, one error line naming the policy, the actor and the kind.
fn assert_refused(r: &Run, actor: &str, kind: &str) {
    assert_eq!(r.code, 1, "{r:?}");
    let line = r.stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "{line:?}");
    assert!(line.starts_with("pmm-append: error: "), "{line:?}");
    for needle in ["policy", &format!("'{actor}'"), &format!("'{kind}'")] {
        assert!(
            line.contains(needle),
            "{line:?} does not mention {needle:?}"
        );
    }
}

/// Asserts that `ev` is the reference violation event for `actor` writing `kind`.
fn assert_violation(ev: &Value, actor: &str, kind: &str) {
    assert_eq!(ev["kind"], "violation", "{ev}");
    assert_eq!(ev["content"], format!("policy_violation:{actor}:{kind}"));
    assert_eq!(
        ev["meta"],
        json!({"actor": actor, "attempt_kind": kind, "source": "runtime"})
    );
}

fn assert_chain_clean(pmm: &Pmm) {
    let r = pmm.run("pmm-verify", &[], "");
    assert_eq!(r.code, 0, "violations must keep the chain valid: {r:?}");
}

fn kinds(evs: &[Value]) -> Vec<&str> {
    evs.iter().map(|e| e["kind"].as_str().unwrap()).collect()
}

const RETRIEVAL: &str = r#"{"type":"retrieval","strategy":"fixed","limit":20}"#;

#[test]
fn cli_config_without_policy_is_refused_and_recorded() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let r = append(&pmm, "config", RETRIEVAL, r#"{"source":"cli"}"#);
    assert_refused(&r, "cli", "config");
    let evs = events(&pmm);
    assert_eq!(evs.len(), 3, "only the violation is added");
    assert_violation(&evs[2], "cli", "config");
    assert!(
        r.stderr.contains("event 3"),
        "names the violation event: {r:?}"
    );
    // The violation was appended, so it is printed like any appended event.
    assert_eq!(
        r.records(),
        vec![evs[2].clone()],
        "stdout: the violation event only"
    );
    assert!(
        !kinds(&evs).contains(&"config"),
        "the config must not be written"
    );
    // The reference default covers all four sensitive kinds, for actor cli only.
    for kind in [
        "checkpoint_manifest",
        "embedding_add",
        "retrieval_selection",
    ] {
        let r = append(&pmm, kind, "{}", r#"{"source":"cli"}"#);
        assert_refused(&r, "cli", kind);
        assert_violation(events(&pmm).last().unwrap(), "cli", kind);
    }
    // Non-sensitive kinds from cli are fine.
    let r = append(&pmm, "user_message", "hi", r#"{"source":"cli"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        kinds(&events(&pmm)),
        [
            "user_message",
            "assistant_message",
            "violation",
            "violation",
            "violation",
            "violation",
            "user_message"
        ]
    );
    assert_chain_clean(&pmm);
}

#[test]
fn cli_config_on_stdin_keeps_earlier_lines_and_reads_no_further() {
    let pmm = Pmm::new();
    let input = format!(
        "{}\n{}\n{}\n",
        r#"{"kind":"user_message","content":"before"}"#,
        json!({"kind": "config", "content": RETRIEVAL, "meta": {"source": "cli"}}),
        r#"{"kind":"user_message","content":"after"}"#,
    );
    let r = pmm.run("pmm-append", &[], &input);
    assert_refused(&r, "cli", "config");
    assert!(r.stderr.contains("<stdin>:2"), "{r:?}");
    let evs = events(&pmm);
    assert_eq!(kinds(&evs), ["user_message", "violation"]);
    assert_eq!(evs[0]["content"], "before");
    assert_violation(&evs[1], "cli", "config");
    assert_chain_clean(&pmm);
}

#[test]
fn cli_config_in_a_batch_rolls_back_the_batch_and_keeps_the_violation() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let input = format!(
        "{}\n{}\n{}\n{}\n",
        r#"{"kind":"user_message","content":"b1"}"#,
        r#"{"kind":"user_message","content":"b2"}"#,
        json!({"kind": "config", "content": RETRIEVAL, "meta": {"source": "cli"}}),
        r#"{"kind":"user_message","content":"b4"}"#,
    );
    let r = pmm.run("pmm-append", &["--batch"], &input);
    assert_refused(&r, "cli", "config");
    assert!(r.stderr.contains("<stdin>:3"), "{r:?}");
    assert!(r.stderr.contains("rolled back"), "{r:?}");
    let evs = events(&pmm);
    assert_eq!(
        evs.len(),
        3,
        "the batch is gone, only the violation remains"
    );
    assert_violation(&evs[2], "cli", "config");
    assert!(evs
        .iter()
        .all(|e| e["content"] != "b1" && e["content"] != "b2"));
    assert_chain_clean(&pmm);
}

#[test]
fn config_from_unknown_source_is_allowed() {
    let pmm = Pmm::new();
    let r = append(&pmm, "config", RETRIEVAL, r#"{"source":"unknown"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    // No source at all is the actor `unknown` too.
    let r = append(&pmm, "config", RETRIEVAL, "{}");
    assert_eq!(r.code, 0, "{r:?}");
    let r = pmm.run(
        "pmm-append",
        &["--batch"],
        &format!(
            "{}\n",
            json!({"kind": "embedding_add", "content": "{}", "meta": {"source": "autonomy_kernel"}})
        ),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(kinds(&events(&pmm)), ["config", "config", "embedding_add"]);
    assert_chain_clean(&pmm);
}

#[test]
fn custom_policy_blocks_its_actor_and_replaces_the_default() {
    let pmm = Pmm::new();
    let policy = r#"{"type":"policy","forbid_sources":{"bot":["embedding_add"]}}"#;
    let r = append(&pmm, "config", policy, r#"{"source":"unknown"}"#);
    assert_eq!(r.code, 0, "{r:?}");

    let r = append(&pmm, "embedding_add", "{}", r#"{"source":"bot"}"#);
    assert_refused(&r, "bot", "embedding_add");
    assert_violation(events(&pmm).last().unwrap(), "bot", "embedding_add");

    // bot may write the other sensitive kinds; cli is no longer forbidden anything.
    for (kind, source) in [
        ("config", "bot"),
        ("config", "cli"),
        ("embedding_add", "cli"),
        ("retrieval_selection", "cli"),
    ] {
        let content = if kind == "config" { RETRIEVAL } else { "{}" };
        let r = append(
            &pmm,
            kind,
            content,
            &json!({ "source": source }).to_string(),
        );
        assert_eq!(r.code, 0, "{kind} from {source}: {r:?}");
    }
    // The newer non-policy configs do not hide the policy: bot is still refused.
    let r = append(&pmm, "embedding_add", "{}", r#"{"source":"bot"}"#);
    assert_refused(&r, "bot", "embedding_add");
    let evs = events(&pmm);
    assert_eq!(
        kinds(&evs),
        [
            "config",
            "violation",
            "config",
            "config",
            "embedding_add",
            "retrieval_selection",
            "violation"
        ]
    );
    assert_chain_clean(&pmm);
}

#[test]
fn unreadable_newer_config_refuses_every_sensitive_write() {
    let pmm = Pmm::new();
    let strict = r#"{"type":"policy","forbid_sources":{"cli":["config"]}}"#;
    assert_eq!(append(&pmm, "config", strict, "{}").code, 0);
    // A policy event whose content is not JSON: allowed when written (the policy in force
    // lets `unknown` write config), unreadable from then on.
    let broken = r#"{"type":"policy","forbid_sources":{"cli":["config"]"#;
    assert_eq!(append(&pmm, "config", broken, "{}").code, 0);
    let bad_config = 2;

    for (kind, source) in [
        ("config", "unknown"),
        ("config", "cli"),
        ("checkpoint_manifest", "autonomy_kernel"),
        ("embedding_add", "bot"),
        ("retrieval_selection", "unknown"),
    ] {
        let content = if kind == "config" { RETRIEVAL } else { "{}" };
        let r = append(
            &pmm,
            kind,
            content,
            &json!({ "source": source }).to_string(),
        );
        assert_refused(&r, source, kind);
        assert!(r.stderr.contains("fail closed"), "{r:?}");
        let v = events(&pmm).last().unwrap().clone();
        assert_eq!(v["kind"], "violation");
        assert_eq!(v["content"], format!("policy_violation:{source}:{kind}"));
        assert_eq!(v["meta"]["actor"], source);
        assert_eq!(v["meta"]["attempt_kind"], kind);
        assert_eq!(v["meta"]["source"], "runtime");
        let why = v["meta"]["policy_unreadable"].as_str().unwrap_or_default();
        assert!(why.contains(&format!("event {bad_config}")), "{v}");
    }
    // Non-sensitive kinds still append.
    for kind in ["user_message", "reflection", "commitment_open"] {
        let r = append(&pmm, kind, "fine", r#"{"source":"cli"}"#);
        assert_eq!(r.code, 0, "{kind}: {r:?}");
    }
    let evs = events(&pmm);
    let configs = evs.iter().filter(|e| e["kind"] == "config").count();
    assert_eq!(configs, 2, "no sensitive write got through");
    assert_eq!(evs.iter().filter(|e| e["kind"] == "violation").count(), 5);

    // The way out is a repair: a readable policy, judged by the last readable policy before
    // the broken one. `cli` was not trusted with config then, so it cannot repair now...
    let open = r#"{"type":"policy","forbid_sources":{}}"#;
    let r = append(&pmm, "config", open, r#"{"source":"cli"}"#);
    assert_refused(&r, "cli", "config");
    assert!(
        !r.stderr.contains("fail closed"),
        "judged by the old policy: {r:?}"
    );
    // ...an actor that was trusted can, and from then on the repaired policy is in force.
    let r = append(&pmm, "config", open, r#"{"source":"operator"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    let r = append(&pmm, "config", RETRIEVAL, r#"{"source":"cli"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    assert_chain_clean(&pmm);
}

#[test]
fn non_json_config_that_cannot_be_a_policy_leaves_the_policy_in_force() {
    let pmm = Pmm::new();
    // No mention of "policy": junk, not a policy. The default stays in force: `cli` is still
    // refused (not fail-closed), and everyone else may still write sensitive kinds.
    assert_eq!(append(&pmm, "config", "not json at all", "{}").code, 0);
    let r = append(&pmm, "config", RETRIEVAL, r#"{"source":"cli"}"#);
    assert_refused(&r, "cli", "config");
    assert!(!r.stderr.contains("fail closed"), "{r:?}");
    let r = append(
        &pmm,
        "embedding_add",
        "{}",
        r#"{"source":"autonomy_kernel"}"#,
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        kinds(&events(&pmm)),
        ["config", "violation", "embedding_add"]
    );
    assert_chain_clean(&pmm);
}

#[test]
fn unreadable_config_without_any_policy_also_fails_closed() {
    let pmm = Pmm::new();
    // With no policy yet, a config from `unknown` is allowed by the default...
    assert_eq!(
        append(&pmm, "config", r#"{"type": "policy", oops"#, "{}").code,
        0
    );
    // ...and from then on the newest config cannot be read: refuse.
    let r = append(
        &pmm,
        "embedding_add",
        "{}",
        r#"{"source":"autonomy_kernel"}"#,
    );
    assert_refused(&r, "autonomy_kernel", "embedding_add");
    assert_eq!(kinds(&events(&pmm)), ["config", "violation"]);
    assert_chain_clean(&pmm);
}

#[test]
fn policy_written_earlier_in_a_batch_applies_to_the_rest_of_it() {
    let pmm = Pmm::new();
    // A permissive policy first lets cli write a config in the same transaction.
    let input = format!(
        "{}\n{}\n",
        json!({"kind": "config", "content": r#"{"type":"policy","forbid_sources":{}}"#}),
        json!({"kind": "config", "content": RETRIEVAL, "meta": {"source": "cli"}}),
    );
    let r = pmm.run("pmm-append", &["--batch"], &input);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records().len(), 2);
    // A forbidding policy takes effect at once too; the refusal rolls the policy back with it.
    let input = format!(
        "{}\n{}\n",
        json!({"kind": "config", "content": r#"{"type":"policy","forbid_sources":{"bot":["embedding_add"]}}"#}),
        json!({"kind": "embedding_add", "content": "{}", "meta": {"source": "bot"}}),
    );
    let r = pmm.run("pmm-append", &["--batch"], &input);
    assert_refused(&r, "bot", "embedding_add");
    assert_eq!(kinds(&events(&pmm)), ["config", "config", "violation"]);
    // The forbidding policy never landed: bot may write now.
    let r = append(&pmm, "embedding_add", "{}", r#"{"source":"bot"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    assert_chain_clean(&pmm);
}
