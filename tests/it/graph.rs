//! `pmm-graph`: every edge rule, the exact order of thread and explain, stats on the reference
//! ledger, DOT and JSON export, errors and their exit codes.

use crate::harness::{Pmm, Run};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Two turns with COMMIT lines, opens (one a re-commit of the same text), a close, reflections
/// with `about_event`, an identity adoption, and untracked events in between. Ids in comments.
fn conversation() -> Pmm {
    let pmm = Pmm::new();
    let events = [
        // 1
        json!({"kind":"user_message","content":"hello","meta":{"role":"user"}}),
        // 2: two COMMIT lines at column 0 (one with trailing spaces), one indented (ignored)
        json!({"kind":"assistant_message",
               "content":"Sure.\r\nCOMMIT: learn rust\n COMMIT: ignored\nCOMMIT: write tests  ",
               "meta":{"role":"assistant"}}),
        // 3
        json!({"kind":"commitment_open","content":"Commitment opened: learn rust",
               "meta":{"cid":"c-rust","text":"learn rust","origin":"assistant","source":"assistant"}}),
        // 4
        json!({"kind":"commitment_open","content":"Commitment opened: write tests",
               "meta":{"cid":"c-tests","text":"write tests","origin":"assistant","source":"assistant"}}),
        // 5: untracked
        json!({"kind":"metrics_turn","content":"provider=dummy","meta":{}}),
        // 6
        json!({"kind":"reflection","content":"{\"intent\":\"reflect\"}","meta":{"about_event":2}}),
        // 7
        json!({"kind":"identity_adoption","content":"Echo","meta":{"token":"Echo"}}),
        // 8
        json!({"kind":"user_message","content":"again","meta":{"role":"user"}}),
        // 9: the same COMMIT text again
        json!({"kind":"assistant_message","content":"Done.\nCOMMIT: learn rust","meta":{"role":"assistant"}}),
        // 10: a second open of c-rust: commits_to the FIRST reply with that text (2)
        json!({"kind":"commitment_open","content":"Commitment opened: learn rust",
               "meta":{"cid":"c-rust","text":"learn rust","origin":"assistant","source":"assistant"}}),
        // 11: closes the FIRST open of c-rust (3)
        json!({"kind":"commitment_close","content":"Commitment closed: c-rust",
               "meta":{"cid":"c-rust","origin":"assistant","source":"assistant"}}),
        // 12: about the second reply: not in c-rust's thread
        json!({"kind":"reflection","content":"on 9","meta":{"about_event":9}}),
        // 13: about an untracked event: no edge
        json!({"kind":"reflection","content":"on 5","meta":{"about_event":5}}),
        // 14
        json!({"kind":"summary_update","content":"summary","meta":{}}),
        // 15
        json!({"kind":"reflection","content":"","meta":{"about_event":2}}),
    ];
    let input: String = events.iter().map(|e| format!("{e}\n")).collect();
    let r = pmm.run("pmm-append", &[], &input);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records().len(), events.len());
    pmm
}

fn ids(r: &Run) -> Vec<i64> {
    r.records()
        .iter()
        .map(|e| e["id"].as_i64().expect("event id"))
        .collect()
}

fn graph(pmm: &Pmm, args: &[&str]) -> Run {
    pmm.run("pmm-graph", args, "")
}

/// (from, to, label) of the JSON export.
fn edges(pmm: &Pmm) -> Vec<(i64, i64, String)> {
    let r = graph(pmm, &["export", "--format", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(r.stdout.trim_end()).unwrap();
    v["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["source"].as_i64().unwrap(),
                l["target"].as_i64().unwrap(),
                l["label"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn every_edge_rule_points_from_new_to_old() {
    let pmm = conversation();
    let e = |a, b, l: &str| (a, b, l.to_string());
    assert_eq!(
        edges(&pmm),
        vec![
            e(2, 1, "replies_to"),
            e(3, 2, "commits_to"),
            e(4, 2, "commits_to"),
            e(6, 2, "reflects_on"),
            e(7, 6, "adopts_identity_for"),
            e(9, 8, "replies_to"),
            e(10, 2, "commits_to"),
            e(11, 3, "closes"),
            e(12, 9, "reflects_on"),
            e(15, 2, "reflects_on"),
        ]
    );
}

#[test]
fn stats_count_tracked_kinds_only() {
    let pmm = conversation();
    let r = graph(&pmm, &["stats"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stdout,
        "{\"type\":\"graph_stats\",\"nodes\":14,\"edges\":10,\"counts_by_kind\":{\"assistant_message\":2,\"commitment_close\":1,\"commitment_open\":3,\"identity_adoption\":1,\"reflection\":4,\"summary_update\":1,\"user_message\":2}}\n"
    );
    let r = graph(&pmm, &["stats", "--text"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .starts_with("nodes: 14\nedges: 10\ncounts_by_kind:\n  assistant_message: 2\n"),
        "{}",
        r.stdout
    );
}

#[test]
fn thread_orders_replies_open_closes_reflections() {
    let pmm = conversation();
    let r = graph(&pmm, &["thread", "c-rust"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ids(&r), [2, 3, 11, 6, 15]);
    // Events exactly as pmm-export prints them.
    let export = pmm.run("pmm-export", &["--format", "jsonl"], "");
    let lines: Vec<&str> = export.stdout.lines().collect();
    let want: Vec<&str> = [2, 3, 11, 6, 15].iter().map(|&i| lines[i - 1]).collect();
    assert_eq!(r.stdout.lines().collect::<Vec<_>>(), want);

    // No close; the reflections are those on the reply, whichever commitment they concern.
    let r = graph(&pmm, &["thread", "c-tests"]);
    assert_eq!(ids(&r), [2, 4, 6, 15]);

    let r = graph(&pmm, &["thread", "c-rust", "--text"]);
    assert_eq!(
        r.stdout,
        "Thread for c-rust:\n\
         [2] assistant_message | Sure.\n\
         [3] commitment_open | Commitment opened: learn rust\n\
         [11] commitment_close | Commitment closed: c-rust\n\
         [6] reflection | {\"intent\":\"reflect\"}\n\
         [15] reflection | \n"
    );
}

#[test]
fn explain_is_the_thread_and_its_neighbours_by_id() {
    let pmm = conversation();
    let r = graph(&pmm, &["explain", "c-rust"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ids(&r), [1, 2, 3, 4, 6, 7, 10, 11, 15]);
    let r = graph(&pmm, &["explain", "c-rust", "--text"]);
    assert!(r
        .stdout
        .starts_with("Explanation for c-rust:\n[1] user_message | hello\n"));
}

#[test]
fn neighbors_follow_the_direction_and_kind() {
    let pmm = conversation();
    let n = |args: &[&str]| {
        let r = graph(&pmm, args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        ids(&r)
    };
    assert_eq!(n(&["neighbors", "2"]), [1, 3, 4, 6, 10, 15]);
    assert_eq!(
        n(&["neighbors", "2", "--direction", "in"]),
        [3, 4, 6, 10, 15]
    );
    assert_eq!(n(&["neighbors", "2", "--direction", "out"]), [1]);
    assert_eq!(n(&["neighbors", "2", "--kind", "reflection"]), [6, 15]);
    assert_eq!(n(&["neighbors", "3"]), [2, 11]);
    // A node without edges: an answer, just an empty one.
    assert_eq!(n(&["neighbors", "14"]), Vec::<i64>::new());
    let r = graph(&pmm, &["neighbors", "9", "--text", "--direction", "in"]);
    assert_eq!(r.stdout, "Neighbors of 9 (in):\n[12] reflection | on 9\n");
}

#[test]
fn nothing_to_answer_about_exits_1_with_a_message() {
    let pmm = conversation();
    for (args, needle) in [
        (&["thread", "nope"][..], "no thread for cid 'nope'"),
        (&["explain", "nope"][..], "no thread for cid 'nope'"),
        (
            &["neighbors", "5"][..],
            "does not track kind 'metrics_turn'",
        ),
        (&["neighbors", "99"][..], "there is no event 99"),
    ] {
        let r = graph(&pmm, args);
        assert_eq!(r.code, 1, "{args:?}: {r:?}");
        assert_eq!(r.stdout, "", "{args:?}");
        let line = r.stderr.trim_end();
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(line.starts_with("pmm-graph: error: "), "{line}");
        assert!(line.contains(needle), "{line}");
    }
}

#[test]
fn bad_arguments_and_missing_ledgers_exit_2() {
    let pmm = Pmm::new();
    graph(&pmm, &["stats"]).assert_error("pmm-graph", &["no such ledger"]);
    assert!(!pmm.db.exists(), "a reader never creates the ledger");
    let pmm = conversation();
    graph(&pmm, &["export", "--text"]).assert_error("pmm-graph", &["--text"]);
    graph(&pmm, &["neighbors", "2", "--kind", "metrics_turn"])
        .assert_error("pmm-graph", &["metrics_turn"]);
    graph(&pmm, &["neighbors", "x"]).assert_error("pmm-graph", &["x"]);
    graph(&pmm, &["neighbors", "2", "--direction", "up"]).assert_error("pmm-graph", &["up"]);
    graph(&pmm, &["export", "--format", "svg"]).assert_error("pmm-graph", &["svg"]);
    graph(&pmm, &["thread"]).assert_error("pmm-graph", &["CID"]);
    graph(&pmm, &[]).assert_error("pmm-graph", &["query"]);
    std::fs::write(pmm.path("junk.db"), "not sqlite").unwrap();
    graph(&pmm, &["--db", "junk.db", "stats"]).assert_error("pmm-graph", &["junk.db"]);
}

#[test]
fn dot_export_is_valid_graphviz_and_deterministic() {
    let pmm = conversation();
    let r = graph(&pmm, &["export", "--format", "dot"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(graph(&pmm, &["export", "--format", "dot"]).stdout, r.stdout);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"digraph pmm {"));
    assert_eq!(lines.last(), Some(&"}"));
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for l in &lines[1..lines.len() - 1] {
        let l = l.trim();
        assert!(l.ends_with(';'), "{l}");
        if let Some((from, rest)) = l.split_once(" -> ") {
            let (to, attrs) = rest.split_once(' ').unwrap();
            edges.push((from.parse::<i64>().unwrap(), to.parse::<i64>().unwrap()));
            assert!(attrs.starts_with("[label=\""), "{l}");
        } else if let Some((id, attrs)) = l.split_once(" [label=\"") {
            let id: i64 = id.parse().unwrap();
            assert!(attrs.starts_with(&format!("{id} ")), "{l}");
            nodes.push(id);
        } else {
            assert_eq!(l, "node [shape=box];");
        }
    }
    assert_eq!(nodes, [1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
    assert_eq!(edges.len(), 10);
    let known: BTreeSet<i64> = nodes.iter().copied().collect();
    assert!(edges
        .iter()
        .all(|(a, b)| known.contains(a) && known.contains(b) && a > b));
    assert!(r.stdout.contains("  11 -> 3 [label=\"closes\"];\n"));

    // With Graphviz installed, it must accept the file.
    let dot = std::process::Command::new("dot").arg("-V").output();
    if dot.is_ok_and(|o| o.status.success()) {
        std::fs::write(pmm.path("g.dot"), &r.stdout).unwrap();
        let out = std::process::Command::new("dot")
            .args(["-Tsvg", "-o"])
            .arg(pmm.path("g.svg"))
            .arg(pmm.path("g.dot"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        eprintln!("dot not installed: checked the DOT structure only");
    }
}

#[test]
fn json_export_is_one_node_link_line() {
    let pmm = conversation();
    let r = graph(&pmm, &["export"]);
    assert_eq!(r.code, 0, "{r:?}");
    let recs = r.records();
    assert_eq!(recs.len(), 1);
    let g = &recs[0];
    assert_eq!(g["type"], "graph");
    assert_eq!(g["directed"], true);
    assert_eq!(g["nodes"][0], json!({"id":1,"kind":"user_message"}));
    assert_eq!(g["nodes"].as_array().unwrap().len(), 14);
    assert_eq!(g["links"].as_array().unwrap().len(), 10);
}

#[test]
fn an_empty_ledger_has_an_empty_graph() {
    let pmm = Pmm::new();
    let r = pmm.run(
        "pmm-append",
        &["--kind", "metrics_turn", "--content", "x"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let r = graph(&pmm, &["stats"]);
    assert_eq!(
        r.stdout,
        "{\"type\":\"graph_stats\",\"nodes\":0,\"edges\":0,\"counts_by_kind\":{}}\n"
    );
    let r = graph(&pmm, &["export", "--format", "dot"]);
    assert_eq!(r.stdout, "digraph pmm {\n  node [shape=box];\n}\n");
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn reference_ledger_graph_matches_an_independent_count() {
    let Some(pmm) = Pmm::with_reference_ledger() else {
        return;
    };
    // Counted by a separate Python transcription of meme_graph.py's rules over the export.
    let r = graph(&pmm, &["stats"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.records()[0],
        json!({"type":"graph_stats","nodes":139,"edges":53,"counts_by_kind":{
            "assistant_message":17,"commitment_close":12,"commitment_open":12,
            "reflection":66,"summary_update":15,"user_message":17}})
    );
    // The ledger's first commitment (engage_with_PMM_creator_tests).
    assert_eq!(
        ids(&graph(&pmm, &["thread", "e86ccfd1"])),
        [94, 105, 146, 106]
    );
    assert_eq!(
        ids(&graph(&pmm, &["explain", "e86ccfd1"])),
        [92, 94, 105, 106, 146]
    );
    assert_eq!(
        ids(&graph(&pmm, &["thread", "a182102a"])),
        [162, 173, 220, 174]
    );
}

#[test]
fn help_version_and_completions() {
    let pmm = Pmm::new();
    let r = graph(&pmm, &["--help"]);
    assert_eq!(r.code, 0, "{r:?}");
    for section in [
        "EXAMPLES:",
        "EXIT STATUS:",
        "ENVIRONMENT:",
        "PMM_DB",
        "dot -Tsvg",
        "jq",
    ] {
        assert!(r.stdout.contains(section), "--help lacks {section}");
    }
    let r = graph(&pmm, &["--version"]);
    assert_eq!(
        r.stdout.trim(),
        format!("pmm-graph {}", env!("CARGO_PKG_VERSION"))
    );
    let r = graph(&pmm, &["--completions", "bash"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("complete ") && r.stdout.contains("--db"));
    assert!(!pmm.db.exists());
}

#[test]
fn closed_stdout_ends_quietly() {
    let pmm = conversation();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' export --format dot | head -1",
            assert_cmd::cargo::cargo_bin("pmm-graph").display()
        ))
        .env("PMM_DB", &pmm.db)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "digraph pmm {\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

/// Issue 21 item 1: one marker rule. A commitment an indented `COMMIT:` line opened keeps, in
/// the graph, the reply that opened it (the graph used to read column 0 only).
#[test]
fn an_indented_commit_keeps_its_reply_in_the_graph() {
    let pmm = Pmm::new();
    let script = pmm.path("replies.jsonl");
    std::fs::write(&script, "\"Sure.\\n   COMMIT: water the plants\"\n").unwrap();
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "plants?",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let recs = r.records();
    let reply = recs
        .iter()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap();
    let open = recs
        .iter()
        .find(|e| e["kind"] == "commitment_open")
        .unwrap();
    let cid = open["meta"]["cid"].as_str().unwrap();
    let thread = pmm.run("pmm-graph", &["thread", cid], "");
    assert_eq!(thread.code, 0, "{thread:?}");
    let ids: Vec<Value> = thread.records().iter().map(|e| e["id"].clone()).collect();
    assert_eq!(
        ids[0], reply["id"],
        "the thread starts with the reply that opened it"
    );
    assert!(ids.contains(&open["id"]));
}
