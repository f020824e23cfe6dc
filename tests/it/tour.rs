//! The README's tour, followed as a new user would: every command line of the `sh` blocks
//! between "## A short tour" and "### A real model" runs as written under bash, in README
//! order, in a fresh directory (this checkout's `scripts/` linked in, `HOME` and `PMM_DB`
//! inside it, the programs first on `PATH`), against stub Ollama and OpenAI servers on
//! 127.0.0.1. A line this test does not know fails it, so the README and the test cannot drift
//! apart; the lines that would change the machine (crontab, systemctl) or need a real model
//! server are named in [`step`] with the reason, and what can be checked of them is checked.
//!
//! The worked example of docs/autonomy.md is run the same way, from the commands the page gives,
//! and the ids and hashes it quotes are checked.
//!
//! Both need `jq` (the pages pipe into it): without it the tests say so and skip, unless
//! `PMM_REQUIRE_TOOLS=1` (set by `.ci/run`), where they fail. Graphviz's `dot` is optional:
//! without it the DOT export is checked by its structure.

use crate::harness::fixture_path;
use crate::stub::{Stub, StubResponse, OLLAMA_MODEL};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const OLLAMA_REPLY: &str = "I am an agent whose mind is a ledger.\nCOMMIT: answer every question";
const OPENAI_REPLY: &str = "Hello from the OpenAI-compatible stub.";

/// The tour's command lines, in order: every line of every ```sh block between the two
/// headings, without blank lines.
fn tour_lines(readme: &str) -> Vec<String> {
    let start = readme
        .find("\n## A short tour")
        .expect("README.md has '## A short tour'");
    let end = readme[start..]
        .find("\n### A real model")
        .map(|i| start + i)
        .expect("README.md has '### A real model' after the tour");
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in readme[start..end].lines() {
        match line.trim_end() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            l if in_sh && !l.trim().is_empty() => lines.push(l.to_string()),
            _ => {}
        }
    }
    lines
}

/// `line` without its trailing `# comment` (the tour's comments follow two or more spaces).
fn command_of(line: &str) -> &str {
    match line.find("  #") {
        Some(i) => line[..i].trim_end(),
        None => line.trim_end(),
    }
}

fn have(program: &str) -> bool {
    crate::harness::have(program)
}

/// The fresh directory and environment the tour runs in.
struct Tour {
    dir: tempfile::TempDir,
    path: String,
    ollama: Stub,
    openai: Stub,
}

impl Tour {
    fn new() -> Tour {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        std::os::unix::fs::symlink(repo.join("scripts"), dir.path().join("scripts"))
            .expect("link scripts/");
        std::fs::create_dir(dir.path().join("home")).expect("mkdir home");
        let bin = Path::new(env!("CARGO_BIN_EXE_pmm"))
            .parent()
            .expect("bin dir")
            .to_path_buf();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Tour {
            dir,
            path,
            ollama: Stub::start(vec![StubResponse::Ollama(OLLAMA_REPLY.into())]),
            openai: Stub::start(vec![StubResponse::OpenAi(OPENAI_REPLY.into())]),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `bash -c 'set -o pipefail; SCRIPT'` in the tour's directory and environment.
    fn bash(&self, script: &str) -> Command {
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(format!("set -o pipefail\n{script}"))
            .current_dir(self.dir.path())
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", self.file("home"))
            .env("LANG", "C.UTF-8")
            .env("PMM_DB", self.file("agent.db"))
            .env("OLLAMA_HOST", self.ollama.url());
        c
    }

    /// Runs `script` with `stdin`; it must exit 0. Returns stdout.
    fn ok(&self, line: &str, script: &str, stdin: &str) -> String {
        let mut child = self
            .bash(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn bash");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write stdin");
        let out: Output = child.wait_with_output().expect("wait");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "README tour line failed ({}):\n  {line}\nstdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// The ledger's events, through pmm-replay.
    fn events(&self) -> Vec<Value> {
        jsonl(&self.ok("(events)", "pmm-replay", ""))
    }

    fn count(&self, kind: &str) -> usize {
        self.events().iter().filter(|e| e["kind"] == kind).count()
    }
}

fn jsonl(s: &str) -> Vec<Value> {
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The one JSON value `s` holds (jq without `-c` spreads it over lines).
fn one_json(s: &str) -> Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("one JSON value expected ({e}): {s}"))
}

/// Runs (or, where it says why, stands in for) one tour line and checks what it did.
fn step(t: &Tour, line: &str, reference: Option<&Path>) {
    let cmd = command_of(line);
    let run = |stdin: &str| t.ok(line, cmd, stdin);
    let records = |out: &str| jsonl(out);
    match cmd {
        c if c.starts_with("repo=$PWD && cd \"$(mktemp -d)\" && ln -s \"$repo/scripts\" scripts") => {
            // The test already runs in a fresh directory with scripts/ linked in. The line
            // itself is run from the checkout (its temporary directory inside the tour's):
            // it must leave the shell outside the checkout with the tour's scripts reachable.
            let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
            let scratch = t.file("scratch");
            std::fs::create_dir_all(&scratch).expect("mkdir scratch");
            let script = format!(
                "cd '{}' && export TMPDIR='{}' && {c} && test -x scripts/ci-verify.sh && test -f scripts/pmm-tick.cron && case \"$(pwd -P)\" in \"$(cd \"$repo\" && pwd -P)\"*) exit 1 ;; esac",
                repo.display(),
                scratch.display()
            );
            t.ok(line, &script, "");
            assert!(t.file("scripts/ci-verify.sh").exists());
        }
        c if c.starts_with("pmm-turn --adapter ollama --model llama3.2 --text ") => {
            // --text: only the reply is printed; the ledger has the rest.
            assert_eq!(run(""), format!("{OLLAMA_REPLY}\n"));
            let events = t.events();
            let reply = events
                .iter()
                .find(|e| e["kind"] == "assistant_message")
                .expect("an assistant_message");
            assert_eq!(reply["content"], OLLAMA_REPLY);
            assert_eq!(reply["meta"]["model"], OLLAMA_MODEL);
            assert_eq!(reply["meta"]["provider"], "ollama");
            assert!(events.iter().any(|e| e["kind"] == "commitment_open"));
            let req = t.ollama.requests().pop().expect("the Ollama stub was asked");
            assert_eq!(req.path, "/api/chat");
            assert_eq!(req.body["model"], "llama3.2");
        }
        c if c.starts_with("llama-server ") => {
            // Stands in: the OpenAI stub plays llama-server (or vLLM), and the next line's
            // address is the stub's.
        }
        c if c.starts_with("OPENAI_BASE_URL=http://127.0.0.1:8080/v1 pmm-turn --chat ") => {
            // The chat talks to the server the line names, not to the dummy adapter.
            let script = c.replace("http://127.0.0.1:8080", &t.openai.url());
            let before = t.count("user_message");
            let asked = t.openai.requests().len();
            let out = t.ok(line, &script, "hello from chat\n/help\n/exit\n");
            assert_eq!(t.count("user_message"), before + 1, "chat appended one turn");
            assert!(out.contains(OPENAI_REPLY), "the server's reply is shown: {out}");
            assert!(out.contains("/export FILE"), "/help answered: {out}");
            let reqs = t.openai.requests();
            assert_eq!(reqs.len(), asked + 1, "the OpenAI stub was asked once");
            let req = reqs.last().expect("a request");
            assert_eq!(req.path, "/v1/chat/completions");
            assert_eq!(req.body["model"], "local");
            let reply = t
                .events()
                .into_iter()
                .rfind(|e| e["kind"] == "assistant_message")
                .expect("an assistant_message");
            assert_eq!(reply["meta"]["provider"], "openai", "{reply}");
        }
        c if c.starts_with("OPENAI_BASE_URL=http://127.0.0.1:8080/v1 ") => {
            let script = c.replace("http://127.0.0.1:8080", &t.openai.url());
            let out = records(&t.ok(line, &script, ""));
            let reply = out
                .iter()
                .find(|e| e["kind"] == "assistant_message")
                .expect("an assistant_message");
            assert_eq!(reply["content"], OPENAI_REPLY);
            let req = t.openai.requests().pop().expect("the OpenAI stub was asked");
            assert_eq!(req.path, "/v1/chat/completions");
            assert_eq!(req.body["model"], "local");
        }
        c if c.starts_with("printf '%s\\n' '\"Noted.") => {
            run("");
            let replies = std::fs::read_to_string(t.file("replies.jsonl")).unwrap();
            let reply: String = serde_json::from_str(replies.trim()).unwrap();
            assert!(reply.contains("\nCOMMIT: "));
        }
        c if c.starts_with("pmm-turn --db scripted.db --adapter scripted") => {
            let opened = one_json(&run(""));
            assert_eq!(opened.as_array().map(Vec::len), Some(1), "{opened}");
        }
        c if c.starts_with("pmm-tick | jq") || c.starts_with("pmm-tick --dry-run | jq") => {
            let d = one_json(&run(""));
            assert!(d["decision"].is_string(), "{d}");
            assert!(d["reasoning"].is_string(), "{d}");
        }
        c if c.contains("| crontab -") => {
            // Not run: it would replace this machine's crontab. What it installs is checked:
            // every line of the cron file runs pmm-tick on a five-field schedule.
            let cron = t.ok(line, "grep -v '^#' scripts/pmm-tick.cron", "");
            let entries: Vec<&str> = cron.lines().filter(|l| !l.trim().is_empty()).collect();
            assert!(!entries.is_empty());
            for e in entries {
                assert!(e.split_whitespace().count() > 5, "{e}");
                assert!(e.contains("pmm-tick"), "{e}");
            }
        }
        c if c.starts_with("mkdir -p ~/.config/systemd/user") => {
            run("");
            let units = t.file("home/.config/systemd/user");
            assert!(units.join("pmm-tick.service").is_file());
            assert!(units.join("pmm-tick.timer").is_file());
        }
        c if c.starts_with("systemctl --user") => {
            // Not run: it needs a systemd user session and would enable a timer on this
            // machine. The units it enables were copied by the line before.
        }
        "pmm-export -o ledger.json.gz" => {
            run("");
            let bytes = std::fs::read(t.file("ledger.json.gz")).unwrap();
            assert_eq!(&bytes[..2], &[0x1f, 0x8b], "a gzip file");
        }
        c if c.starts_with("scripts/ci-verify.sh ") => {
            run("");
            let anchors = std::fs::read_to_string(t.file("anchors.txt")).unwrap();
            assert!(!anchors.trim().is_empty(), "anchors saved");
            // The next CI run, after more events, passes against them.
            t.ok(line, "pmm-append --kind user_message --content 'later'", "");
            t.ok(line, "pmm-export -o ledger.json.gz", "");
            run("");
        }
        c if c.starts_with("pmm-verify --deep") => {
            let deep = one_json(&run(""));
            assert!(deep.is_object(), "{deep}");
        }
        c if c.starts_with("pmm-replay --follow") => follow(t, line, cmd),
        c if c.starts_with("pmm-replay --state | jq") => {
            let s = one_json(&run(""));
            assert!(s["open_commitments"].is_array(), "{s}");
            assert!(!s["open_commitments"].as_array().unwrap().is_empty(), "{s}");
            assert!(s["autonomy"].is_object(), "{s}");
        }
        c if c.starts_with("pmm-metrics | jq") => {
            let m = one_json(&run(""));
            assert!(m["event_count"].as_u64().unwrap_or(0) > 10, "{m}");
            assert_eq!(m["broken_links"], 0, "{m}");
        }
        "pmm-graph stats" => {
            let s = one_json(&run(""));
            assert!(s.is_object(), "{s}");
        }
        c if c.starts_with("pmm-graph export --format dot | dot") => {
            if have("dot") {
                run("");
                let svg = std::fs::read_to_string(t.file("graph.svg")).unwrap();
                assert!(svg.contains("<svg"), "an SVG");
            } else {
                eprintln!("tour: Graphviz 'dot' is not installed; checking the DOT export only");
                let dot = t.ok(line, "pmm-graph export --format dot", "");
                assert!(dot.starts_with("digraph"), "{dot}");
            }
        }
        c if c.starts_with("pmm-export --db kept.db -o kept.json && cmp kept.json reference.json") => {
            // Both sides missing (no reference export here, nothing imported): the proof fails.
            let both_failed = t
                .bash(&format!(
                    "mkdir -p nothing-here && cd nothing-here && gunzip -c chat_session_ledger.json.gz > reference.json; {c}"
                ))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("run bash");
            assert!(!both_failed.success(), "cmp passed with both sides failed");
            match reference {
                Some(_) => {
                    assert_eq!(run(""), "identical\n");
                    let kept = std::fs::read(t.file("kept.json")).unwrap();
                    assert!(!kept.is_empty());
                    assert_eq!(kept, std::fs::read(t.file("reference.json")).unwrap());
                }
                None => eprintln!("tour: no reference ledger fixture; not run: {line}"),
            }
        }
        c if c.contains("chat_session_ledger.json.gz") => match reference {
            Some(_) => {
                run("");
            }
            None => eprintln!("tour: no reference ledger fixture; not run: {line}"),
        },
        c if c.starts_with("pmm-append --kind user_message --content 'hello again, corrected'") => {
            let e = one_json(&run(""));
            assert_eq!(e["content"], "hello again, corrected");
            assert!(e["meta"]["supersedes"][0].as_i64().is_some(), "{e}");
        }
        c if c.starts_with("pmm-append --erase-query hello ") => {
            let r = one_json(&run(""));
            assert!(!r["erased"].as_array().unwrap().is_empty(), "{r}");
        }
        c if c.starts_with("pmm-append --kind user_message") => {
            let e = one_json(&run(""));
            assert_eq!(e["kind"], "user_message");
            assert_eq!(e["content"], "hello");
        }
        c if c.starts_with("printf '%s\\n' '{\"kind\":\"reflection\"") => {
            let e = one_json(&run(""));
            assert_eq!(e["kind"], "reflection");
        }
        "pmm export --format jsonl | pmm verify -" => {
            let summary = jsonl(&run("")).pop().expect("a summary");
            assert_eq!(summary["type"], "summary");
            assert_eq!(summary["ok"], true, "{summary}");
        }
        "source <(pmm completions bash)" => {
            let out = t.ok(line, &format!("{cmd}\ncomplete -p pmm pmm-verify pmm-tick"), "");
            assert_eq!(out.lines().count(), 3, "{out}");
        }
        "source <(pmm completions zsh)" => {
            if have("zsh") {
                let script = format!(
                    "zsh -c 'autoload -U compinit && compinit -u && {cmd} && whence -w _pmm'"
                );
                t.ok(line, &script, "");
            } else {
                eprintln!("tour: zsh is not installed; checking what it would source");
                let out = t.ok(line, "pmm completions zsh", "");
                assert!(out.starts_with("#compdef"), "{out}");
            }
        }
        "pmm completions fish | source" => {
            if have("fish") {
                t.ok(line, &format!("fish -c '{cmd}; complete -C \"pmm-verify --\"'"), "");
            } else {
                eprintln!("tour: fish is not installed; checking what it would source");
                let out = t.ok(line, "pmm completions fish", "");
                assert!(out.contains("complete -c pmm"), "{out}");
            }
        }
        _ => panic!(
            "README tour line not known to tests/it/tour.rs (add how to run and check it):\n  {line}"
        ),
    }
}

/// `pmm-replay --follow … | jq …`: started in its own process group, fed reflections until
/// the pipeline prints one, then stopped.
fn follow(t: &Tour, line: &str, cmd: &str) {
    let mut child = t
        .bash(cmd)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the follower");
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let (seen, stdout) = (seen.clone(), child.stdout.take().expect("stdout"));
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                seen.lock().unwrap().push(l);
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    while seen.lock().unwrap().is_empty() && Instant::now() < deadline {
        n += 1;
        let reflection =
            format!(r#"{{"kind":"reflection","content":"{{\"intent\":\"followed {n}\"}}"}}"#);
        t.ok(line, "pmm-append", &format!("{reflection}\n"));
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{}", child.id())])
        .status();
    let _ = child.wait();
    let _ = reader.join();
    let seen = seen.lock().unwrap();
    let first = seen
        .first()
        .unwrap_or_else(|| panic!("nothing followed: {line}"));
    let v: Value = serde_json::from_str(first).expect("jq printed JSON");
    assert!(
        v["intent"]
            .as_str()
            .is_some_and(|s| s.starts_with("followed ")),
        "{v}"
    );
}

/// True when jq is there (see [`tool_or_skip`]).
fn jq_or_skip(what: &str) -> bool {
    crate::harness::tool_or_skip("jq", what)
}

#[test]
fn readme_tour_works_as_written() {
    if !jq_or_skip("the README tour") {
        return;
    }
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let lines = tour_lines(&readme);
    assert!(lines.len() > 20, "the tour has its commands: {lines:?}");
    let t = Tour::new();
    // The reference ledger, under the name the tour gives it, gzipped as the reference writes.
    let reference = fixture_path("reference-ledgers/GPT-5.1-ledger.json").map(|src| {
        let gz = t.file("chat_session_ledger.json.gz");
        let mut enc = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).expect("create gz"),
            flate2::Compression::default(),
        );
        enc.write_all(&std::fs::read(src).expect("read fixture"))
            .expect("gzip");
        enc.finish().expect("gzip");
        gz
    });
    for line in &lines {
        step(&t, line, reference.as_deref());
    }
}

#[test]
fn tour_lines_are_parsed_with_their_comments_apart() {
    let readme = "x\n## A short tour\n```sh\na --b  # c\n\n```\ntext\n```sh\nd\n```\n### A real model\n```sh\ne\n```\n";
    assert_eq!(tour_lines(readme), vec!["a --b  # c", "d"]);
    assert_eq!(command_of("a --b  # c"), "a --b");
    assert_eq!(command_of("pmm-tick"), "pmm-tick");
}

/// The text between `start` (inclusive search start) and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let i = text
        .find(start)
        .unwrap_or_else(|| panic!("'{start}' not found"))
        + start.len();
    let j = text[i..]
        .find(end)
        .unwrap_or_else(|| panic!("'{end}' not found after '{start}'"));
    &text[i..i + j]
}

/// docs/autonomy.md's worked example, run from its own "to follow along" commands: the ids,
/// cids, decisions and the hashes it quotes (cut to 8 digits) must be what the programs make,
/// and its determinism loop must print what the page shows.
#[test]
fn the_autonomy_page_example_runs_as_written() {
    if !jq_or_skip("the autonomy page's determinism loop") {
        return;
    }
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/autonomy.md"))
            .expect("docs/autonomy.md");
    let t = Tour::new();
    let script = between(&doc, "to follow along:\n\n```sh\n", "```");
    t.ok(
        "(docs/autonomy.md example)",
        &format!("set -e\n{script}"),
        "",
    );
    let db = t.file("example.db");
    let events = jsonl(&t.ok(
        "(events)",
        &format!("pmm-replay --db '{}'", db.display()),
        "",
    ));
    let event = |id: u64| {
        events
            .iter()
            .find(|e| e["id"] == id)
            .unwrap_or_else(|| panic!("no event {id}"))
    };
    assert_eq!(event(13)["meta"]["cid"], "8a574b28");
    assert_eq!(event(15)["kind"], "metrics_turn");
    assert_eq!(event(130)["meta"]["cid"], "f2e3c6ae");
    assert_eq!(event(140)["kind"], "commitment_close");
    assert_eq!(event(140)["meta"]["age"], 124);
    assert_eq!(event(144)["kind"], "config");
    assert_eq!(event(142)["kind"], "outcome_observation");
    assert!(event(153)["content"]
        .as_str()
        .is_some_and(|c| c.contains("\"intent\":\"commitment_review\"")));

    // The two hashes the page quotes, as it quotes them.
    let delta = between(&doc, "\"delta_hash\":\"", "…");
    assert_eq!(
        &event(22)["meta"]["delta_hash"].as_str().unwrap()[..8],
        delta,
        "docs/autonomy.md quotes another delta_hash for event 22"
    );
    let root = between(&doc, "\\\"root_hash\\\":\\\"", "…");
    let manifest: Value =
        serde_json::from_str(event(54)["content"].as_str().expect("content")).unwrap();
    assert_eq!(
        &manifest["root_hash"].as_str().unwrap()[..8],
        root,
        "docs/autonomy.md quotes another root_hash for event 54"
    );
    let state = one_json(&t.ok(
        "(state at 141)",
        &format!("pmm-replay --db '{}' --state --at 141", db.display()),
        "",
    ));
    assert_eq!(state["thresholds"]["set_by"], 4);

    // The determinism loop, and the two lines the page shows after it.
    let block = between(&doc, "\n$ for db in a.db b.db;", "```");
    let (cmd, shown) = block.split_once('\n').expect("the loop and its output");
    let out = t.ok(
        "(determinism loop)",
        &format!("for db in a.db b.db;{cmd}"),
        "",
    );
    assert_eq!(out.trim(), shown.trim());
}

/// Issue 13 item 17: the README tour says what it needs and where it runs, its proof of a
/// byte-for-byte import cannot pass when both sides failed, the chat line talks to the server
/// of its block, exit 2 is not "nothing is written", and docs/operations.md points at a scale
/// table that exists.
#[test]
fn readme_tour_is_self_contained_and_its_proofs_can_fail() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let lines = tour_lines(&readme);
    // The first command leaves the checkout for a scratch directory.
    assert!(
        command_of(&lines[0]).starts_with("repo=$PWD && cd \"$(mktemp -d)\""),
        "the tour starts in a temporary directory: {}",
        lines[0]
    );
    let tour = between(&readme, "\n## A short tour", "\n### A real model");
    for tool in ["jq", "Graphviz"] {
        let before_first_block = tour.split("```sh").next().unwrap();
        assert!(
            before_first_block.contains(tool),
            "the tour names {tool} as a prerequisite before its first command"
        );
    }
    // A `cmp -` fed by a pipe and a process substitution passes on two empty streams.
    for (name, text) in [
        ("README.md", readme.clone()),
        (
            "docs/operations.md",
            std::fs::read_to_string(root.join("docs/operations.md")).unwrap(),
        ),
        (
            "src/cmd/append/mod.rs",
            std::fs::read_to_string(root.join("src/cmd/append/mod.rs")).unwrap(),
        ),
    ] {
        assert!(
            !text.contains("| cmp -"),
            "{name}: cmp reads a pipe whose failure it cannot see"
        );
    }
    assert!(
        tour.contains("chat_session_<UTC time>_ledger.json.gz"),
        "the tour says where chat_session_ledger.json.gz comes from"
    );
    // Every chat line in the tour names its adapter (no silent dummy).
    for l in lines.iter().filter(|l| l.contains("--chat")) {
        assert!(l.contains("--adapter"), "{l}");
    }
    assert!(
        !readme.contains("nothing is written for it"),
        "exit 2 keeps what was committed before the bad item"
    );
    let ops = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    assert!(
        !ops.contains("scale table in\nthe README") && !ops.contains("scale table in the README"),
        "docs/operations.md points at a README table that does not exist"
    );
}
