//! `pmm-turn --chat` from a pipe (issue 21 item 10): every slash command answered from the
//! ledger, end to end through the real program, and a session whose reader goes away early.
//! `/adapter`, `/endpoint` and `/model NAME` are in stream.rs; `/export` onto the ledger in
//! robust.rs; Ctrl-C at a terminal in stream.rs.

use crate::harness::{Pmm, Run};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;

/// A chat session with the dummy adapter (which echoes the message and opens the commitment
/// "note this item") on `pmm`'s ledger, `stdin` as typed.
fn chat(pmm: &Pmm, stdin: &str) -> Run {
    let r = pmm.run("pmm-turn", &["--chat", "--adapter", "dummy"], stdin);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("panicked"), "{r:?}");
    r
}

/// A ledger with two chat turns.
fn two_turns() -> Pmm {
    let pmm = Pmm::new();
    chat(&pmm, "hello there\nsecond\n");
    pmm
}

fn user_messages(pmm: &Pmm) -> usize {
    pmm.run("pmm-replay", &["--kind", "user_message"], "")
        .records()
        .len()
}

#[test]
fn chat_shows_the_visible_reply_and_raw_toggles_the_markers() {
    let pmm = Pmm::new();
    let r = chat(&pmm, "hello there\n/raw\nsecond\n/RAW\nthird\n");
    assert_eq!(
        r.stdout,
        "Echo: hello there\n\
         raw replies on\n\
         Echo: second\nCOMMIT: note this item\n\
         raw replies off\n\
         Echo: third\n"
    );
    let banner = r.stderr.lines().next().unwrap_or_default();
    assert!(
        banner.starts_with("pmm — ")
            && banner.ends_with("ledger.db (adapter dummy). /help for commands, /exit to leave."),
        "{r:?}"
    );
    // What each turn changed goes to stderr, beside the replies.
    assert_eq!(
        r.stderr
            .matches("  [opened [\"e2eb5791\"], closed [], ")
            .count(),
        3,
        "{r:?}"
    );
    assert_eq!(user_messages(&pmm), 3);
}

#[test]
fn chat_exit_and_quit_end_the_session_and_blank_lines_are_skipped() {
    let pmm = Pmm::new();
    let r = chat(&pmm, "\n   \nfirst\n/exit\nnever sent\n");
    assert_eq!(r.stdout, "Echo: first\n");
    assert_eq!(user_messages(&pmm), 1);
    let r = chat(&pmm, "  /Quit  \nnever sent either\n");
    assert_eq!(r.stdout, "");
    // End of input ends it too.
    chat(&pmm, "last\n");
    assert_eq!(user_messages(&pmm), 2);
}

#[test]
fn chat_help_lists_every_command_and_an_unknown_one_points_to_it() {
    let pmm = Pmm::new();
    let r = chat(&pmm, "/help\n/nosuch x\n");
    for command in [
        "/replay [N]",
        "/metrics",
        "/diag",
        "/goals",
        "/rsm",
        "/graph",
        "/raw",
        "/model [NAME]",
        "/adapter [NAME [ENDPOINT]]",
        "/endpoint [URL]",
        "/export FILE",
        "/help",
        "/exit",
    ] {
        assert!(
            r.stdout.lines().any(|l| l.starts_with(command)),
            "{command} in {}",
            r.stdout
        );
    }
    assert!(
        r.stdout
            .ends_with("\nunknown command /nosuch (try /help)\n"),
        "{r:?}"
    );
    // Commands append nothing.
    assert_eq!(pmm.count(), 0);
}

#[test]
fn chat_replay_shows_the_newest_events_one_line_each() {
    let pmm = two_turns();
    let events = pmm.run("pmm-replay", &[], "").records();
    let line = |e: &Value| {
        let content: String = e["content"].as_str().unwrap().chars().take(100).collect();
        format!(
            "[{}] {} {}: {}",
            e["id"],
            &e["ts"].as_str().unwrap()[..19],
            e["kind"].as_str().unwrap(),
            content.replace('\n', " ")
        )
    };
    let newest = |n: usize| -> String {
        events[events.len() - n..]
            .iter()
            .map(|e| line(e) + "\n")
            .collect()
    };
    assert_eq!(chat(&pmm, "/replay 2\n").stdout, newest(2));
    // Without N (or with one that is not a number): the last 20.
    assert!(events.len() > 20);
    assert_eq!(chat(&pmm, "/replay\n").stdout, newest(20));
    assert_eq!(chat(&pmm, "/replay many\n").stdout, newest(20));
}

#[test]
fn chat_diag_shows_the_turn_metrics_oldest_first() {
    let pmm = two_turns();
    let turns = pmm
        .run("pmm-replay", &["--kind", "metrics_turn"], "")
        .records();
    assert_eq!(turns.len(), 2);
    let r = chat(&pmm, "/diag\n");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{r:?}");
    for (line, e) in lines.iter().zip(&turns) {
        assert_eq!(
            *line,
            format!(
                "[{}] 2025-11-24T05:55:41 metrics_turn: {}",
                e["id"],
                e["content"].as_str().unwrap()
            )
        );
    }
}

#[test]
fn chat_metrics_are_pmm_metrics() {
    let pmm = two_turns();
    let mut shown: Value = serde_json::from_str(&chat(&pmm, "/metrics\n").stdout).unwrap();
    // The one measurement of the run; pmm-metrics --deterministic leaves it out.
    assert!(shown["replay_ms_per_event"].is_number(), "{shown}");
    shown.as_object_mut().unwrap().remove("replay_ms_per_event");
    let want = &pmm.run("pmm-metrics", &["--deterministic"], "").records()[0];
    assert_eq!(&shown, want);
    assert_eq!(shown["event_count"], 23);
}

#[test]
fn chat_goals_lists_the_open_commitments() {
    let pmm = Pmm::new();
    assert_eq!(chat(&pmm, "/goals\n").stdout, "no open commitments\n");
    chat(&pmm, "hello there\n");
    let state = &pmm.run("pmm-replay", &["--state"], "").records()[0];
    let open = state["open_commitments"].as_array().unwrap();
    assert_eq!(open.len(), 1, "{state}");
    let c = &open[0];
    assert_eq!(
        chat(&pmm, "/goals\n").stdout,
        format!(
            "{}  opened at {}  ({})  {}\n",
            c["cid"].as_str().unwrap(),
            c["opened_at"],
            c["origin"].as_str().unwrap(),
            c["text"].as_str().unwrap()
        )
    );
    assert_eq!(c["text"], "note this item");
}

#[test]
fn chat_rsm_and_graph_show_the_projections() {
    let pmm = two_turns();
    let state = &pmm.run("pmm-replay", &["--state"], "").records()[0];
    assert_eq!(
        chat(&pmm, "/rsm\n").stdout,
        "tendencies: uniqueness_emphasis=10\nknowledge gaps: \nreflection intents: 2\n"
    );
    let graph: Value = serde_json::from_str(&chat(&pmm, "/graph\n").stdout).unwrap();
    assert_eq!(graph, state["graph"]);
    let stats = &pmm.run("pmm-graph", &["stats"], "").records()[0];
    assert_eq!(graph["nodes"], stats["nodes"]);
    assert_eq!(graph["edges"], stats["edges"]);
}

#[test]
fn chat_export_writes_what_pmm_replay_prints() {
    let pmm = two_turns();
    let r = chat(&pmm, "/export\n/export out.jsonl\n");
    assert_eq!(
        r.stdout,
        "usage: /export FILE\n23 events written to out.jsonl\n"
    );
    let written = std::fs::read_to_string(pmm.path("out.jsonl")).unwrap();
    assert_eq!(written, pmm.run("pmm-replay", &[], "").stdout);
}

/// Which of the session's output streams its reader closes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Closed {
    /// `pmm-turn --chat | head -1`.
    Stdout,
    /// `pmm-turn --chat 2>&1 | head -1`: the banner and the notes go to stderr.
    Stderr,
}

/// Runs a chat session whose reader goes away early: writes `first`, reads one line of the
/// `closed` stream and closes it, writes `rest` (the session's next writes there fail) and
/// waits. The exit code and what the other stream got.
fn chat_closing(pmm: &Pmm, closed: Closed, first: &str, rest: &str) -> (Option<i32>, String) {
    let mut child = pmm
        .std_cmd("pmm-turn")
        .args(["--chat", "--adapter", "dummy"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(first.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let (mut other, read_closed): (Box<dyn Read>, Box<dyn Read>) = match closed {
        Closed::Stdout => (
            Box::new(child.stderr.take().unwrap()),
            Box::new(child.stdout.take().unwrap()),
        ),
        Closed::Stderr => (
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ),
    };
    let mut read_closed = BufReader::new(read_closed);
    let mut line = String::new();
    read_closed.read_line(&mut line).unwrap();
    assert!(!line.is_empty(), "{closed:?} said nothing");
    drop(read_closed);
    stdin.write_all(rest.as_bytes()).unwrap();
    drop(stdin);
    let mut seen = String::new();
    other.read_to_string(&mut seen).unwrap();
    (child.wait().unwrap().code(), seen)
}

/// Issue 21 item 10: a closed stdout (`| head -1`) does not end the session, let alone panic:
/// every message typed is still a turn. (The session printed with `println!`, which panics
/// when stdout is a closed pipe.)
#[test]
fn chat_with_a_closed_stdout_keeps_every_turn_and_does_not_panic() {
    let pmm = Pmm::new();
    let rest: String = (2..=20)
        .map(|i| format!("message {i}\n/help\n/replay 3\n"))
        .collect();
    let (code, stderr) = chat_closing(&pmm, Closed::Stdout, "message 1\n", &rest);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(user_messages(&pmm), 20);
    let replies = pmm.run("pmm-replay", &["--kind", "assistant_message"], "");
    assert_eq!(replies.records().len(), 20, "{stderr}");
}

/// Issue 21 item 10: a closed stderr (`pmm-turn --chat 2>&1 | head -1`, where the banner
/// comes first) does not end the session either. (The notes went through `eprintln!`, which
/// panicked at the first turn after the reader left: exit 101, one message kept.)
#[test]
fn chat_with_a_closed_stderr_keeps_every_turn_and_does_not_panic() {
    let pmm = Pmm::new();
    let rest: String = (2..=20)
        .map(|i| format!("message {i}\n/nosuch\n/export\n"))
        .chain(["/adapter nosuch\n".to_string()])
        .collect();
    let (code, stdout) = chat_closing(&pmm, Closed::Stderr, "message 1\n", &rest);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.ends_with(
            "Echo: message 20\nunknown command /nosuch (try /help)\nusage: /export FILE\n"
        ),
        "{stdout}"
    );
    assert_eq!(user_messages(&pmm), 20);
}

/// The lines a chat session printed for `commands` on `pmm`'s ledger.
fn answers(pmm: &Pmm, commands: &str) -> Vec<String> {
    chat(pmm, commands)
        .stdout
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn chat_rsm_at_an_event_and_between_two_and_bad_arguments_say_so() {
    let pmm = two_turns();
    let r = chat(&pmm, "/rsm 5\n").stdout;
    assert!(r.starts_with("as of event 5\ntendencies: "), "{r}");
    let r = chat(&pmm, "/rsm diff 3 23\n").stdout;
    let want = &pmm.run("pmm-replay", &["--diff", "3", "23"], "").records()[0];
    let delta: Vec<String> = want["tendencies_delta"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k}={:+}", v.as_i64().unwrap()))
        .collect();
    assert_eq!(
        r,
        format!(
            "from event 3 to 23\ntendencies delta: {}\ngaps added: \ngaps resolved: \n",
            delta.join(", ")
        )
    );
    let lines = answers(&pmm, "/rsm x\n/rsm 999\n/rsm diff 1\n/rsm 1 2\n");
    assert_eq!(
        lines,
        [
            "error: event ids are integers, not \"x\"",
            "error: event 999 is not in the ledger (events 1..23)",
            "usage: /rsm [ID | diff A B]",
            "usage: /rsm [ID | diff A B]",
        ]
    );
}

#[test]
fn chat_graph_thread_and_explain_are_pmm_graphs() {
    let pmm = two_turns();
    for q in ["thread", "explain"] {
        let want = pmm.run("pmm-graph", &[q, "e2eb5791", "--text"], "");
        assert_eq!(want.code, 0, "{want:?}");
        let shown = chat(&pmm, &format!("/graph {q} e2eb5791\n")).stdout;
        assert_eq!(shown, want.stdout, "{q}");
    }
    let lines = answers(
        &pmm,
        "/graph thread nosuch\n/graph bogus\n/graph concepts\n",
    );
    assert_eq!(
        lines,
        [
            "no commitment has cid nosuch",
            "usage: /graph [stats] | /graph thread CID | /graph explain CID | /graph concepts",
            "no concepts defined",
        ]
    );
}

#[test]
fn chat_export_formats_write_what_pmm_export_writes() {
    let pmm = two_turns();
    let r = chat(
        &pmm,
        "/export md talk.md\n/export jsonl\n/export json all.json\n/export csv\n",
    );
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines[0], "23 events exported (md) to talk.md");
    assert_eq!(
        lines[1],
        "23 events exported (jsonl) to chat_export_20251124_055541.jsonl"
    );
    assert!(lines[3].starts_with("usage: /export FILE"), "{r:?}");
    for (format, file) in [
        ("md", "talk.md"),
        ("jsonl", "chat_export_20251124_055541.jsonl"),
        ("json", "all.json"),
    ] {
        let want = pmm.run("pmm-export", &["--format", format], "");
        let got = std::fs::read_to_string(pmm.path(file)).unwrap();
        assert_eq!(got, want.stdout, "{format}");
    }
    assert!(!pmm.path("csv").exists());
}

#[test]
fn chat_raw_last_shows_the_reply_as_received() {
    let pmm = Pmm::new();
    let r = chat(
        &pmm,
        "/raw last\nhello\n/raw last\n/raw off\n/raw sideways\n",
    );
    let reply = &pmm
        .run("pmm-replay", &["--kind", "assistant_message"], "")
        .records()[0];
    assert_eq!(
        r.stdout,
        format!(
            "no replies yet\nEcho: hello\n[{}] Echo: hello\nCOMMIT: note this item\nraw replies off\nusage: /raw [on | off | last]\n",
            reply["id"]
        )
    );
}

#[test]
fn chat_pm_retrieval_checkpoint_and_config() {
    let pmm = two_turns();
    let reply = pmm
        .run("pmm-replay", &["--kind", "assistant_message"], "")
        .records()[1]["id"]
        .as_i64()
        .unwrap();
    let r = chat(&pmm, "/pm retrieval status\n").stdout;
    assert!(
        r.starts_with(
            "strategy:hybrid limit:7 budget:8000 model:hash64 dims:64\nmessages:4 embeddings:4"
        ),
        "{r}"
    );
    let r = chat(&pmm, &format!("/pm retrieval verify {reply}\n")).stdout;
    assert!(
        r.ends_with("prompt rebuilt from it: matches its prompt_sha256\n"),
        "{r}"
    );
    let lines = answers(
        &pmm,
        "/pm retrieval verify 1\n/pm checkpoint\n/pm nonsense\n/config retrieval fixed limit 3\n/config retrieval fixed limit 3\n/config retrieval fixed limit x\n/config retrieval sideways\n",
    );
    assert_eq!(
        lines[0],
        "error: event 1 is not a turn's user or assistant message"
    );
    assert_eq!(
        lines[1],
        "projection checkpoint saved at event 23 (a cache: pmm-replay --check-fast proves it)"
    );
    assert_eq!(
        lines[2],
        "usage: /pm retrieval status | /pm retrieval verify TURN | /pm checkpoint"
    );
    assert!(
        lines[3].starts_with("retrieval config updated (event 24): "),
        "{lines:?}"
    );
    assert_eq!(lines[4], "no change (idempotent)");
    assert_eq!(lines[5], "error: limit must be a positive integer");
    assert!(
        lines[6].starts_with("usage: /config retrieval"),
        "{lines:?}"
    );
    let state = &pmm.run("pmm-replay", &["--state"], "").records()[0];
    let cfg = &state["retrieval"];
    assert_eq!(cfg["strategy"], "fixed", "{state}");
    assert_eq!(cfg["limit"], 3, "{state}");
}

/// No tick's events between a turn's user message and its `metrics_turn`.
fn assert_turns_whole(events: &[Value]) {
    let mut in_turn = false;
    for e in events {
        match e["kind"].as_str().unwrap_or_default() {
            "user_message" => in_turn = true,
            "metrics_turn" => in_turn = false,
            "autonomy_stimulus" | "autonomy_tick" => {
                assert!(!in_turn, "a tick inside a turn at event {}", e["id"])
            }
            _ => {}
        }
    }
}

#[test]
fn chat_with_autonomy_ticks_between_turns_and_stops_with_the_session() {
    let pmm = Pmm::new();
    let mut child = pmm
        .std_cmd("pmm-turn")
        .args(["--chat", "--adapter", "dummy", "--autonomy", "1s"])
        .env_remove("PMM_NOW")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in ["hello there", "second", "third"] {
        writeln!(stdin, "{line}").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1300));
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("[autonomy: slot "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let events = pmm.run("pmm-replay", &[], "").records();
    let ticks = events
        .iter()
        .filter(|e| e["kind"] == "autonomy_tick")
        .count();
    assert!(ticks >= 2, "a tick at once and between the turns: {ticks}");
    let asked = events
        .iter()
        .filter(|e| e["kind"] == "assistant_message" && e["meta"]["source"] == "autonomy_kernel")
        .count();
    assert!(asked >= 1, "a thinking tick between the turns: {stderr}");
    assert_turns_whole(&events);
    assert_eq!(user_messages(&pmm), 3);
    let r = pmm.run("pmm-verify", &["--deep", "--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
}
