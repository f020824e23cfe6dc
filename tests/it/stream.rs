//! Streaming and interrupts (issue 15 items 2 and 3): replies streamed as they are generated,
//! in both wire formats, against stub servers on 127.0.0.1; a stream cut short; SIGINT and
//! SIGTERM during a one-shot turn; Ctrl-C in `--chat` under a pseudo-terminal (tmux).

use crate::harness::Pmm;
use crate::stub::{Gate, Pace, Streamed, Stub, StubResponse, OLLAMA_MODEL, OPENAI_MODEL};
use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which wire format a test speaks.
#[derive(Debug, Clone, Copy)]
enum Wire {
    Ollama,
    OpenAi,
}

impl Wire {
    fn stub(self, st: Streamed) -> Stub {
        Stub::start(vec![match self {
            Wire::Ollama => StubResponse::OllamaStream(st),
            Wire::OpenAi => StubResponse::OpenAiStream(st),
        }])
    }

    /// `pmm-turn` arguments and environment that point at `stub`.
    fn args(self, stub: &Stub) -> (Vec<String>, (&'static str, String)) {
        match self {
            Wire::Ollama => (
                vec!["--adapter".into(), "ollama".into()],
                ("OLLAMA_HOST", stub.url()),
            ),
            Wire::OpenAi => (
                vec!["--adapter".into(), "openai".into()],
                ("OPENAI_BASE_URL", format!("{}/v1", stub.url())),
            ),
        }
    }

    fn model(self) -> &'static str {
        match self {
            Wire::Ollama => OLLAMA_MODEL,
            Wire::OpenAi => OPENAI_MODEL,
        }
    }

    fn tokens(self) -> &'static str {
        match self {
            Wire::Ollama => "in_tokens:11,out_tokens:7",
            Wire::OpenAi => "in_tokens:13,out_tokens:5",
        }
    }
}

/// `pmm-turn` as a child process with the harness's clean environment, stdout and stderr piped.
fn spawn(pmm: &Pmm, args: &[String], env: &[(&str, String)]) -> Child {
    let mut c = Command::cargo_bin("pmm-turn").expect("pmm-turn");
    c.current_dir(pmm.dir.path())
        .env_remove("RUST_BACKTRACE")
        .env_remove("PMM_ADAPTER")
        .env_remove("PMM_MODEL")
        .env_remove("OLLAMA_HOST")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("PMM_DB", &pmm.db)
        .env("PMM_NOW", "2025-11-24T05:55:41.194157Z")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("spawn pmm-turn")
}

/// Waits for `child` (at most 60 s), returning its exit code and what it printed.
fn finish(mut child: Child) -> (Option<i32>, String, String) {
    let (mut out, mut err) = (String::new(), String::new());
    let se = child.stderr.take();
    let t = std::thread::spawn(move || {
        let mut e = String::new();
        if let Some(mut se) = se {
            let _ = se.read_to_string(&mut e);
        }
        e
    });
    if let Some(mut so) = child.stdout.take() {
        let _ = so.read_to_string(&mut out);
    }
    err.push_str(&t.join().expect("stderr reader"));
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return (status.code(), out, err);
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("pmm-turn did not end: {out} {err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every event of the ledger.
fn events(pmm: &Pmm) -> Vec<Value> {
    let r = pmm.run("pmm-replay", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
}

/// The kinds of the events from the last user message on.
fn kinds_from_last_user_message(events: &[Value]) -> Vec<String> {
    let at = events
        .iter()
        .rposition(|e| e["kind"] == "user_message")
        .expect("a user message");
    events[at..]
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Waits until `cond` holds (at most 30 s).
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let started = Instant::now();
    while !cond() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pieces arrive on stdout one by one, each before the stub sends the next (it holds each
/// back until the test has seen the one before), and the ledger stores their concatenation.
fn streams_in_order(wire: Wire) {
    let pmm = Pmm::new();
    let gate = Gate::new();
    let pieces = [
        "Hello",
        ", I am",
        " streaming é😀",
        "\nline two",
        "\nCOMMIT: watch the stream",
    ];
    let st = Streamed::new(&pieces).pace(Pace::Gate(gate.clone()));
    let whole = st.text();
    let stub = wire.stub(st);
    let (mut args, env) = wire.args(&stub);
    args.extend(["--stream", "always", "--text", "say hello"].map(String::from));
    let mut child = spawn(&pmm, &args, &[env]);
    let mut stdout = child.stdout.take().expect("stdout");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    for i in 0..pieces.len() {
        let want = pieces[..=i].concat();
        while !String::from_utf8_lossy(&seen).starts_with(&want) {
            let n = stdout.read(&mut buf).expect("read stdout");
            assert!(
                n > 0,
                "stdout ended after {:?}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
        gate.open();
    }
    let _ = stdout.read_to_end(&mut seen);
    let (code, _, stderr) = finish(child);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!gate.timed_out(), "a piece was held back and not shown");
    assert_eq!(String::from_utf8(seen).unwrap(), format!("{whole}\n"));
    let reqs = stub.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body["stream"], true);
    if let Wire::OpenAi = wire {
        assert_eq!(reqs[0].body["stream_options"]["include_usage"], true);
    }
    let evs = events(&pmm);
    let replies: Vec<&Value> = evs
        .iter()
        .filter(|e| e["kind"] == "assistant_message")
        .collect();
    assert_eq!(replies.len(), 1, "the reply is appended once");
    assert_eq!(replies[0]["content"], whole.as_str());
    assert_eq!(replies[0]["meta"]["model"], wire.model());
    let metrics = evs.iter().rfind(|e| e["kind"] == "metrics_turn").unwrap();
    assert!(
        metrics["content"].as_str().unwrap().contains(wire.tokens()),
        "{metrics}"
    );
    assert!(evs
        .iter()
        .any(|e| e["kind"] == "commitment_open" && e["meta"]["text"] == "watch the stream"));
}

#[test]
fn ollama_pieces_arrive_in_order_and_the_reply_is_their_concatenation() {
    streams_in_order(Wire::Ollama);
}

#[test]
fn openai_pieces_arrive_in_order_and_the_reply_is_their_concatenation() {
    streams_in_order(Wire::OpenAi);
}

/// A stream the server closes before its end: a generation_failure, nothing else after the
/// user's message (and its embedding), exit 3; the pieces shown so far are not the reply.
fn cut_stream(wire: Wire) {
    let pmm = Pmm::new();
    let stub = wire.stub(Streamed::new(&["The answer is", " forty"]).cut());
    let (mut args, env) = wire.args(&stub);
    args.extend(["--stream", "always", "what is the answer?"].map(String::from));
    let (code, stdout, stderr) = finish(spawn(&pmm, &args, &[env]));
    assert_eq!(code, Some(3), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("The answer is forty"),
        "the pieces were shown: {stderr}"
    );
    assert!(stderr.contains("pmm-turn: error: "), "{stderr}");
    let evs = events(&pmm);
    assert_eq!(
        kinds_from_last_user_message(&evs),
        ["user_message", "embedding_add", "generation_failure"]
    );
    let failure = evs.last().unwrap();
    assert!(failure["meta"].get("reason").is_none(), "{failure}");
    // Piped stdout is still JSON Lines: the events the turn appended.
    let printed: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON Lines"))
        .collect();
    assert_eq!(printed.last().unwrap()["kind"], "generation_failure");
}

#[test]
fn an_ollama_stream_cut_midway_is_a_generation_failure() {
    cut_stream(Wire::Ollama);
}

#[test]
fn an_openai_stream_cut_midway_is_a_generation_failure() {
    cut_stream(Wire::OpenAi);
}

#[test]
fn piped_output_asks_for_no_stream_and_stays_json_lines() {
    let pmm = Pmm::new();
    let ollama = Stub::start(vec![StubResponse::Ollama("Plain.".into())]);
    let r = pmm
        .cmd("pmm-turn")
        .env("OLLAMA_HOST", ollama.url())
        .args(["--adapter", "ollama", "hi"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0));
    assert_eq!(ollama.requests()[0].body["stream"], false);
    assert!(
        r.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    for line in String::from_utf8(r.stdout).unwrap().lines() {
        serde_json::from_str::<Value>(line).expect("JSON Lines");
    }
}

/// Sends `signal` to a one-shot turn once the stub has its request, and checks the exit status
/// and the generation_failure.
fn interrupt_one_shot(pmm: &Pmm, child: Child, signal: i32, asked: impl Fn() -> bool) {
    wait_until("the request", &asked);
    std::thread::sleep(Duration::from_millis(200));
    let pid = child.id() as i32;
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, Some(128 + signal), "{stdout}\n{stderr}");
    let name = if signal == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    };
    assert!(
        stderr.contains(&format!("interrupted by {name}")),
        "{stderr}"
    );
    let evs = events(pmm);
    assert_eq!(
        kinds_from_last_user_message(&evs),
        ["user_message", "embedding_add", "generation_failure"]
    );
    let user = evs.iter().rfind(|e| e["kind"] == "user_message").unwrap();
    let failure = evs.last().unwrap();
    assert_eq!(failure["meta"]["reason"], "interrupted", "{failure}");
    assert_eq!(failure["meta"]["about_event"], user["id"]);
    assert!(stdout
        .lines()
        .last()
        .unwrap()
        .contains("generation_failure"));
}

#[test]
fn sigint_during_a_slow_one_shot_reply_exits_130_with_the_interruption_recorded() {
    let pmm = Pmm::new();
    let stub = Stub::start(vec![StubResponse::Hang]);
    let args = ["--adapter", "ollama", "--retries", "0", "take your time"].map(String::from);
    let child = spawn(&pmm, &args, &[("OLLAMA_HOST", stub.url())]);
    let started = Instant::now();
    interrupt_one_shot(&pmm, child, libc::SIGINT, || !stub.requests().is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "not waited out"
    );
}

#[test]
fn sigterm_during_a_streamed_reply_exits_143_with_the_interruption_recorded() {
    let pmm = Pmm::new();
    let pieces: Vec<String> = (0..200).map(|i| format!("word{i} ")).collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let stub =
        Wire::OpenAi.stub(Streamed::new(&pieces).pace(Pace::Every(Duration::from_millis(100))));
    let (mut args, env) = Wire::OpenAi.args(&stub);
    args.extend(["--stream", "always", "a long story"].map(String::from));
    let child = spawn(&pmm, &args, &[env]);
    interrupt_one_shot(&pmm, child, libc::SIGTERM, || !stub.requests().is_empty());
}

#[test]
fn sigint_stops_a_cmd_program_and_everything_it_started() {
    let pmm = Pmm::new();
    let pidfile = pmm.path("sleeper.pid");
    let command = format!("sleep 30 & echo $! > '{}'; wait", pidfile.display());
    let args = ["--adapter", "cmd", "--command", &command, "wait for it"].map(String::from);
    let child = spawn(&pmm, &args, &[]);
    interrupt_one_shot(&pmm, child, libc::SIGINT, || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    let sleeper: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until("the program's child to end", || {
        // SAFETY: signal 0 only checks whether the process exists.
        let gone = unsafe { libc::kill(sleeper, 0) } != 0;
        gone || is_zombie(sleeper)
    });
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

// ---- --chat under a pseudo-terminal ------------------------------------------------------

/// True when tmux is there (see [`crate::harness::tool_or_skip`]).
fn tmux_or_skip(what: &str) -> bool {
    crate::harness::tool_or_skip("tmux", what)
}

/// A tmux server of our own (its own socket), running one command in a 100x40 pane.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(dir: &Path, command: &str) -> Tmux {
        let socket = format!(
            "pmm-test-{}-{}",
            std::process::id(),
            dir.file_name().unwrap().to_string_lossy()
        );
        let t = Tmux { socket };
        t.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-x",
            "100",
            "-y",
            "40",
            "-s",
            "pmm",
            command,
        ]);
        t
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "pmm"];
        args.extend(keys);
        self.run(&args);
    }

    fn type_line(&self, line: &str) {
        self.keys(&["-l", line]);
        self.keys(&["Enter"]);
    }

    fn pane(&self) -> String {
        self.run(&["capture-pane", "-p", "-J", "-t", "pmm", "-S", "-200"])
    }

    /// Waits until the pane satisfies `cond`; returns it.
    fn wait(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let pane = self.pane();
            if cond(&pane) {
                return pane;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "timed out waiting for {what}; the pane:\n{pane}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// Single-quoted for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Lines of the pane that begin with the prompt.
fn prompts(pane: &str) -> usize {
    pane.lines().filter(|l| l.starts_with("you>")).count()
}

#[test]
fn chat_in_a_terminal_streams_is_interrupted_by_ctrl_c_and_switches_adapter() {
    if !tmux_or_skip("the chat interrupt test") {
        return;
    }
    let pmm = Pmm::new();
    let story: Vec<String> = (1..=300).map(|i| format!("and then {i}, ")).collect();
    let story: Vec<&str> = story.iter().map(String::as_str).collect();
    let ollama = Stub::start(vec![
        StubResponse::OllamaStream(
            Streamed::new(&["Hello!", " I stream", " as I think.", "\nCOMMIT: say hello"])
                .pace(Pace::Every(Duration::from_millis(150))),
        ),
        StubResponse::OllamaStream(
            Streamed::new(&story).pace(Pace::Every(Duration::from_millis(150))),
        ),
    ]);
    let openai = Stub::start(vec![StubResponse::OpenAiStream(
        Streamed::new(&["Now OpenAI", " answers."]).pace(Pace::Every(Duration::from_millis(100))),
    )]);
    let bin = assert_cmd::cargo::cargo_bin("pmm-turn");
    let command = format!(
        "cd {dir} && env -u PMM_ADAPTER -u PMM_MODEL -u OPENAI_API_KEY -u OPENAI_BASE_URL \
         HOME={dir} NO_COLOR=1 PMM_DB={db} OLLAMA_HOST={host} {bin} --chat --adapter ollama; \
         echo \"[exit $?]\"; sleep 600",
        dir = sh_quote(&pmm.dir.path().to_string_lossy()),
        db = sh_quote(&pmm.db.to_string_lossy()),
        host = sh_quote(&ollama.url()),
        bin = sh_quote(&bin.to_string_lossy()),
    );
    let tmux = Tmux::start(pmm.dir.path(), &command);
    let banner = format!(
        "adapter ollama at {}/api/chat, model llama3.2",
        ollama.url()
    );
    tmux.wait("the banner and the prompt", |p| {
        p.contains(&banner) && prompts(p) == 1
    });

    // A streamed reply, its marker line hidden.
    tmux.type_line("hi");
    tmux.wait("the streamed reply", |p| {
        p.contains("Hello! I stream as I think.") && prompts(p) == 2
    });

    // Ctrl-C in the middle of a long reply: back at the prompt, the interruption recorded.
    tmux.type_line("tell me a long story");
    tmux.wait("the story to start", |p| p.contains("and then 2, "));
    tmux.keys(&["C-c"]);
    let pane = tmux.wait("the interruption", |p| {
        p.contains("interrupted: your message is kept") && prompts(p) == 3
    });
    assert!(!pane.contains("and then 300"), "the story went on: {pane}");

    // Switch to the OpenAI-compatible server and go on talking.
    tmux.type_line(&format!("/adapter openai {}/v1", openai.url()));
    tmux.wait("the switch", |p| {
        p.contains(&format!(
            "adapter openai at {}/v1/chat/completions, model gpt-4o-mini",
            openai.url()
        ))
    });
    tmux.type_line("and now?");
    tmux.wait("the OpenAI reply", |p| {
        p.contains("Now OpenAI answers.") && prompts(p) == 5
    });

    // Ctrl-D leaves.
    tmux.keys(&["C-d"]);
    let pane = tmux.wait("the end", |p| p.contains("[exit "));
    assert!(pane.contains("[exit 0]"), "{pane}");
    // For docs/turn.md: cargo test --test it chat_in_a_terminal -- --nocapture
    eprintln!("{}", pane.trim_end());

    let evs = events(&pmm);
    let of = |kind: &str| -> Vec<&Value> { evs.iter().filter(|e| e["kind"] == kind).collect() };
    let users = of("user_message");
    assert_eq!(users.len(), 3);
    let replies = of("assistant_message");
    assert_eq!(replies.len(), 2);
    assert_eq!(
        replies[0]["content"],
        "Hello! I stream as I think.\nCOMMIT: say hello"
    );
    assert_eq!(replies[0]["meta"]["provider"], "ollama");
    assert_eq!(replies[1]["content"], "Now OpenAI answers.");
    assert_eq!(replies[1]["meta"]["provider"], "openai");
    let failures = of("generation_failure");
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0]["meta"]["reason"], "interrupted");
    assert_eq!(failures[0]["meta"]["about_event"], users[1]["id"]);
    assert!(failures[0]["content"]
        .as_str()
        .unwrap()
        .contains("interrupted by SIGINT"));
    // Nothing of the story was appended as a reply; the history was saved.
    let history = std::fs::read_to_string(pmm.path(".pmm_history")).unwrap_or_default();
    assert!(history.contains("tell me a long story"), "{history}");
    assert_eq!(openai.requests()[0].body["stream"], true);
}

#[test]
fn a_server_that_does_not_stream_is_read_whole() {
    // Asked for a stream, some servers answer with one plain completion: that is the reply.
    for (wire, response) in [
        (
            Wire::Ollama,
            StubResponse::Ollama("Whole, not streamed.".into()),
        ),
        (
            Wire::OpenAi,
            StubResponse::OpenAi("Whole, not streamed.".into()),
        ),
    ] {
        let pmm = Pmm::new();
        let stub = Stub::start(vec![response]);
        let (mut args, env) = wire.args(&stub);
        args.extend(["--stream", "always", "--text", "hi"].map(String::from));
        let (code, stdout, stderr) = finish(spawn(&pmm, &args, &[env]));
        assert_eq!(code, Some(0), "{wire:?}: {stderr}");
        assert_eq!(stdout, "Whole, not streamed.\n", "{wire:?}");
        assert_eq!(stub.requests()[0].body["stream"], true);
    }
}

#[test]
fn chat_switches_adapter_and_endpoint_and_keeps_its_adapter_when_a_switch_fails() {
    let pmm = Pmm::new();
    let ollama = Stub::start(vec![StubResponse::Ollama("From Ollama.".into())]);
    let openai = Stub::start(vec![StubResponse::OpenAi("From OpenAI.".into())]);
    let stdin = format!(
        "/adapter\n/endpoint http://x\n/adapter cmd\n/adapter gpt\n\
         /adapter ollama {}\nfirst\n/adapter openai\n/endpoint {}/v1\n/model local\nsecond\n",
        ollama.url(),
        openai.url()
    );
    let r = pmm.run("pmm-turn", &["--chat", "--adapter", "dummy"], &stdin);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("(adapter dummy). /help"),
        "the banner names the adapter: {}",
        r.stderr
    );
    let errors: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 3, "{}", r.stderr);
    assert!(errors[0].contains("the dummy adapter asks no one"));
    assert!(errors[1].contains("needs a command"));
    assert!(errors[2].contains("unknown adapter 'gpt'"));
    let shown: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        shown,
        [
            "adapter dummy".to_string(),
            format!(
                "adapter ollama at {}/api/chat, model llama3.2",
                ollama.url()
            ),
            "From Ollama.".to_string(),
            "adapter openai at https://api.openai.com/v1/chat/completions, model gpt-4o-mini"
                .to_string(),
            format!(
                "adapter openai at {}/v1/chat/completions, model gpt-4o-mini",
                openai.url()
            ),
            format!(
                "adapter openai at {}/v1/chat/completions, model local",
                openai.url()
            ),
            "From OpenAI.".to_string(),
        ]
    );
    assert_eq!(openai.requests()[0].body["model"], "local");
    assert_eq!(
        ollama.requests()[0].body["stream"],
        false,
        "piped: no stream"
    );
}

/// A streamed reply that carries the key (a server echoing the Authorization header) shows
/// and stores it scrubbed, as a whole reply does (issue 15 item 7 with item 2).
#[test]
fn a_key_echoed_in_a_stream_is_scrubbed_from_the_terminal_and_the_ledger() {
    const KEY: &str = "sk-live-stream-0123456789abcdef";
    let pmm = Pmm::new();
    // The key arrives split over pieces, as a model echoing it token by token sends it.
    let stub = Wire::OpenAi.stub(Streamed::new(&[
        "Your key is sk-live-str",
        "eam-0123456",
        "789abcdef, keep it safe.",
    ]));
    let (mut args, env) = Wire::OpenAi.args(&stub);
    args.extend(["--stream", "always", "who am I?"].map(String::from));
    let (code, stdout, stderr) = finish(spawn(
        &pmm,
        &args,
        &[env, ("OPENAI_API_KEY", KEY.to_string())],
    ));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY),
        "{stdout}\n{stderr}"
    );
    let all = pmm.run("pmm-replay", &[], "").stdout;
    assert!(!all.contains(KEY), "{all}");
    assert!(all.contains("***"), "{all}");
}

/// How a child that was given a time limit ended.
struct Ended {
    /// `None`: it was still running at the limit, and was killed.
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
    /// Its largest resident set seen, in MB.
    peak_mb: u64,
}

/// Waits for `child` at most `limit`, reading what it prints meanwhile and watching its memory;
/// kills it at the limit.
fn finish_within(mut child: Child, limit: Duration) -> Ended {
    let started = Instant::now();
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    let code = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s.code();
        }
        let rss = std::fs::read_to_string(&status).unwrap_or_default();
        if let Some(kb) = rss
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak_kb = peak_kb.max(kb);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    Ended {
        code,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
        took,
        peak_mb: peak_kb / 1024,
    }
}

/// `pmm-turn --timeout SECS --retries 0 --stream always` against a server whose streamed
/// answer never ends, each event or line bringing `piece`, with a key to scrub (issue 34 item
/// 1). The size tests give a timeout longer than their limit, so that only the size can stop
/// them in time (with 2 s, a loaded machine let the timeout win the race now and then).
fn endless(wire: Wire, piece: &str, secs: &str) -> (Pmm, Ended) {
    let pmm = Pmm::new();
    let stub = Stub::start(vec![match wire {
        Wire::Ollama => StubResponse::EndlessNdjson(piece.to_string()),
        Wire::OpenAi => StubResponse::EndlessStream(piece.to_string()),
    }]);
    let (mut args, env) = wire.args(&stub);
    args.extend(
        [
            "--timeout",
            secs,
            "--retries",
            "0",
            "--stream",
            "always",
            "hello",
        ]
        .map(String::from),
    );
    let key = ("OPENAI_API_KEY", "sk-endless-0123456789".to_string());
    let ended = finish_within(spawn(&pmm, &args, &[env, key]), Duration::from_secs(30));
    (pmm, ended)
}

/// What every endless stream must come to: a failed turn (exit 3, recorded), within `limit`,
/// in bounded memory, with a bounded echo.
fn assert_stopped(pmm: &Pmm, e: &Ended, why: &str, limit: Duration) {
    let tail: String = e
        .stderr
        .chars()
        .rev()
        .take(300)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    eprintln!(
        "stopped after {:?}, {} MB resident at most, {} bytes echoed",
        e.took,
        e.peak_mb,
        e.stderr.len()
    );
    assert_eq!(e.code, Some(3), "after {:?}: {} …{tail}", e.took, e.stdout);
    assert!(e.took < limit, "took {:?}", e.took);
    assert!(e.stderr.contains(why), "…{tail}");
    assert!(
        e.stderr.len() < 11 * 1024 * 1024,
        "echoed {} bytes",
        e.stderr.len()
    );
    assert!(e.peak_mb < 300, "{} MB resident", e.peak_mb);
    assert_eq!(
        kinds_from_last_user_message(&events(pmm)),
        ["user_message", "embedding_add", "generation_failure"]
    );
}

#[test]
fn an_endless_stream_of_big_events_stops_at_the_size_of_a_whole_reply() {
    // The sweep's server: each event 60,000 x's. It ran 10 minutes at 3.6 GB.
    let (pmm, e) = endless(Wire::OpenAi, &"x".repeat(60_000), "30");
    assert_stopped(
        &pmm,
        &e,
        "the reply is larger than 10 MB",
        Duration::from_secs(10),
    );
}

#[test]
fn an_endless_ndjson_stream_of_big_lines_stops_at_the_size_of_a_whole_reply() {
    let (pmm, e) = endless(Wire::Ollama, &"x".repeat(60_000), "30");
    assert_stopped(
        &pmm,
        &e,
        "the reply is larger than 10 MB",
        Duration::from_secs(10),
    );
}

#[test]
fn an_endless_stream_stops_at_the_timeout() {
    // Tiny pieces as fast as they go: 2 s bring far less than 10 MB of reply.
    let (pmm, e) = endless(Wire::OpenAi, "x", "2");
    // The 2 s, and a margin for starting the program on a busy machine (when only the
    // reading thread's own deadline stopped it, 7 s for NDJSON, no end in 30 s for SSE).
    assert_stopped(&pmm, &e, "no answer within 2 s", Duration::from_secs(5));
    assert!(e.took >= Duration::from_secs(2), "{:?}", e.took);
}

#[test]
fn an_endless_ndjson_stream_stops_at_the_timeout() {
    let (pmm, e) = endless(Wire::Ollama, "x", "2");
    // The 2 s, and a margin for starting the program on a busy machine (when only the
    // reading thread's own deadline stopped it, 7 s for NDJSON, no end in 30 s for SSE).
    assert_stopped(&pmm, &e, "no answer within 2 s", Duration::from_secs(5));
    assert!(e.took >= Duration::from_secs(2), "{:?}", e.took);
}

#[test]
fn ctrl_c_in_a_chat_with_autonomy_stops_the_session_and_the_tick_in_flight() {
    if !tmux_or_skip("the chat autonomy interrupt test") {
        return;
    }
    let pmm = Pmm::new();
    // The turn's answer, then the background tick's, which never comes in time.
    let ollama = Stub::start(vec![
        StubResponse::SlowOllama(500, "Hello.".into()),
        StubResponse::SlowOllama(60_000, "Too late.".into()),
    ]);
    let bin = assert_cmd::cargo::cargo_bin("pmm-turn");
    let command = format!(
        "cd {dir} && env -u PMM_ADAPTER -u PMM_MODEL -u PMM_NOW HOME={dir} NO_COLOR=1 \
         PMM_DB={db} OLLAMA_HOST={host} {bin} --chat --adapter ollama --autonomy 1s; \
         echo \"[exit $?]\"; sleep 600",
        dir = sh_quote(&pmm.dir.path().to_string_lossy()),
        db = sh_quote(&pmm.db.to_string_lossy()),
        host = sh_quote(&ollama.url()),
        bin = sh_quote(&bin.to_string_lossy()),
    );
    let tmux = Tmux::start(pmm.dir.path(), &command);
    tmux.wait("the prompt", |p| prompts(p) >= 1);
    tmux.type_line("hi");
    tmux.wait("the reply", |p| p.contains("Hello."));
    let started = Instant::now();
    while ollama.requests().len() < 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "no tick asked");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The tick's call is in flight: Ctrl-C at the prompt ends the session and the tick.
    tmux.keys(&["C-c"]);
    let pane = tmux.wait("the end", |p| p.contains("[exit "));
    assert!(pane.contains("[exit 0]"), "{pane}");
    assert!(started.elapsed() < Duration::from_secs(30), "{pane}");
    let evs = events(&pmm);
    let failures: Vec<&Value> = evs
        .iter()
        .filter(|e| e["kind"] == "generation_failure")
        .collect();
    let [failure] = &failures[..] else {
        panic!("the tick's call is recorded as interrupted: {evs:?}")
    };
    assert_eq!(failure["meta"]["reason"], "interrupted", "{failure}");
    assert_eq!(failure["meta"]["source"], "autonomy_kernel", "{failure}");
    let r = pmm.run("pmm-verify", &["--deep", "--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
}
