//! `pmm-turn --chat`: an interactive session over the turn library, with line editing, history
//! and the reference's slash commands (FORMATS.md §13.2), all answered in-process. On a
//! terminal the reply is streamed as it is generated, after a spinner; Ctrl-C during a model
//! call cancels that call (recorded as a `generation_failure`) and returns to the prompt.
//!
//! With `--autonomy DURATION` a thread ticks the ledger in the background (`Ticker`): a
//! tick at once, then one every DURATION, each a thinking tick with the session's adapter.
//! One lock (the gate) is held by a turn from its first write to its last and by a tick from
//! its first read to its last write, so a tick never comes between a turn's events; leaving
//! the session (`/exit`, Ctrl-D, Ctrl-C at the prompt) stops the ticker, cancelling a call in
//! flight, and waits for it.

use super::admin;
use crate::cli::line::{self, Style};
use crate::cli::Exit;
use crate::event::Kind;
use crate::llm::{self, Adapter, AdapterKind, Cancel, Config, TextSink};
use crate::projection::checkpoint;
use crate::store::{EventLog, Filter, Ledger};
use crate::turn::{self, Options, TurnError};
use indicatif::{ProgressBar, ProgressStyle};
use rustyline::error::ReadlineError;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const HELP: &str = "\
/replay [N]   the last N events (default 20), one line each
/metrics      ledger metrics (as pmm-metrics)
/diag         the last five metrics_turn events
/goals        open commitments, and the kernel's internal goals worked
/rsm [ID | diff A B]  the recursive self-model (tendencies, gaps, reflection count) now,
              as of event ID, or what changed from event A to event B
/graph        event-graph statistics (also /graph stats)
/graph thread CID | explain CID  a commitment's thread, or it and its neighbours
/graph concepts  the concept layer: each concept, its definition and bindings
/raw          toggle showing the raw reply (markers included); /raw on, /raw off
/raw last     the newest reply exactly as received
/model [NAME] show the adapter and model, or switch model
/adapter [NAME [ENDPOINT]]  show or switch the adapter (ollama, openai, cmd, scripted,
              dummy; its default model), and where it asks
/endpoint [URL] show or switch where the adapter asks: the Ollama host, the OpenAI base
              URL, the cmd command or the script
/export FILE  write the ledger as JSON Lines to FILE (never the ledger itself)
/export md|json|jsonl [FILE]  the conversation as Markdown, or the ledger as JSON or JSON
              Lines (as pmm-export writes them), to FILE or chat_export_<time>.<ext>
/pm retrieval status  the retrieval config, full-text index and vector coverage
/pm retrieval verify TURN  re-check a turn's recorded selection and rebuild its prompt
/pm checkpoint  save a projection checkpoint (a cache) at the head
/config retrieval fixed|vector|hybrid [limit N] [budget CHARS]  change the retrieval config
/help         this list
/exit         leave (also Ctrl-D)
Ctrl-C while the model answers stops it (the interruption is recorded); Ctrl-C again leaves.";

/// The visible reply: the model's text without marker lines.
fn visible(reply: &str) -> String {
    reply
        .lines()
        .filter(|l| !crate::marker::is_marker_line(l))
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_string()
}

/// A slash command as typed: its name (lowercased), its words after the name joined by single
/// spaces, and the rest of the line as typed (a cmd command keeps its spacing).
#[derive(Debug, PartialEq, Eq)]
struct Slash<'a> {
    name: String,
    arg: String,
    rest: &'a str,
}

/// Splits a slash command line into its parts.
fn parse_slash(line: &str) -> Slash<'_> {
    let mut words = line.split_whitespace();
    let name = words.next().unwrap_or("").to_lowercase();
    let arg = words.collect::<Vec<_>>().join(" ");
    let rest = line
        .trim_start()
        .split_once(char::is_whitespace)
        .map_or("", |(_, r)| r.trim());
    Slash { name, arg, rest }
}

/// Answers a slash command: the text to show, or `None` when the session ends.
fn command(
    ledger: &mut Ledger,
    adapter: &mut Box<dyn Adapter>,
    cfg: &mut Config,
    raw: &mut bool,
    line: &str,
    clock: &crate::event::Clock,
) -> anyhow::Result<Option<String>> {
    let Slash { name, arg, rest } = parse_slash(line);
    let words: Vec<&str> = arg.split_whitespace().collect();
    let text = match name.as_str() {
        "/exit" | "/quit" => return Ok(None),
        "/help" => HELP.to_string(),
        "/replay" => replay(ledger, &arg)?,
        "/metrics" => metrics(ledger)?,
        "/diag" => diag(ledger)?,
        "/goals" => goals(ledger)?,
        "/rsm" => admin::rsm(ledger, &words)?,
        "/graph" => admin::graph(ledger, &words)?,
        "/raw" => match words[..] {
            ["last"] => admin::last_reply(ledger)?,
            [] | ["on"] | ["off"] => {
                *raw = words.first().map_or(!*raw, |w| *w == "on");
                format!("raw replies {}", if *raw { "on" } else { "off" })
            }
            _ => admin::RAW_USAGE.into(),
        },
        "/pm" => admin::pm(ledger, &words)?,
        "/config" => admin::config(ledger, &words, clock)?,
        "/model" => reconfigure(adapter, cfg, model_config(cfg, &arg))?,
        "/adapter" => reconfigure(adapter, cfg, adapter_config(cfg, rest)?)?,
        "/endpoint" => reconfigure(adapter, cfg, endpoint_config(cfg, rest)?)?,
        "/export" => match admin::export(ledger, &words, clock)? {
            Some(done) => done,
            // A FILE is a path: a bare word is a format this does not know.
            None if arg.is_empty() || arg.contains(['.', '/']) => export(ledger, &arg)?,
            None => {
                "usage: /export FILE (a path, with a '.' or a '/') | /export md|json|jsonl [FILE]"
                    .into()
            }
        },
        _ => format!("unknown command {name} (try /help)"),
    };
    Ok(Some(text))
}

/// `/replay [N]`: the last N events (default 20), one line each.
fn replay(ledger: &Ledger, arg: &str) -> anyhow::Result<String> {
    let n = arg.parse().unwrap_or(20);
    let evs = ledger.tail(&Filter::default(), n)?;
    Ok(evs
        .iter()
        .map(|e| line::event(e, Style::Chat))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// `/metrics`: the ledger's metrics, as `pmm-metrics` prints them.
fn metrics(ledger: &Ledger) -> anyhow::Result<String> {
    let m = crate::audit::metrics::compute(&ledger.source(), &|_| {})?;
    Ok(serde_json::to_string_pretty(&m)?)
}

/// `/diag`: the last five `metrics_turn` events, oldest first.
fn diag(ledger: &Ledger) -> anyhow::Result<String> {
    let evs = ledger.last_of_kind(Kind::MetricsTurn, 5)?;
    Ok(evs
        .iter()
        .rev()
        .map(|e| line::event(e, Style::Chat))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// `/goals`: the open commitments, in the order they were opened.
fn goals(ledger: &Ledger) -> anyhow::Result<String> {
    let p = checkpoint::project(ledger, None, true)?.projections;
    let open = p.mirror.open_in_order();
    let mut lines: Vec<String> = open
        .iter()
        .map(|c| {
            format!(
                "{}  opened at {}  ({})  {}",
                c.cid, c.opened_at, c.origin, c.text
            )
        })
        .collect();
    if lines.is_empty() {
        lines.push("no open commitments".into());
    }
    for c in p.mirror.open_goals() {
        lines.push(format!(
            "internal goal open: {}  opened at {}  {}  ({})",
            c.cid,
            c.opened_at,
            c.text,
            c.cause.as_deref().unwrap_or_default()
        ));
    }
    // The kernel's compressed goals are worked and closed within their tick.
    let (worked, newest) = p.mirror.internal_goals_worked();
    if let Some(newest) = newest {
        lines.push(format!(
            "internal goals worked: {} (newest: {} {}, closed at event {})",
            worked,
            newest.cid,
            newest.text,
            newest.closed_at.unwrap_or_default()
        ));
    }
    Ok(lines.join("\n"))
}

/// `/model [NAME]`: the configuration with model `name`, or `None` (no change) without one.
fn model_config(cfg: &Config, name: &str) -> Option<Config> {
    (!name.is_empty()).then(|| {
        let mut next = cfg.clone();
        next.model = Some(name.to_string());
        next
    })
}

/// `/adapter [NAME [ENDPOINT]]`: the configuration for adapter `NAME` with its default model
/// (and `ENDPOINT`, when given), or `None` (no change) for an empty `rest`.
fn adapter_config(cfg: &Config, rest: &str) -> anyhow::Result<Option<Config>> {
    if rest.is_empty() {
        return Ok(None);
    }
    let (name, endpoint) = rest
        .split_once(char::is_whitespace)
        .map_or((rest, ""), |(n, e)| (n, e.trim()));
    let mut next = cfg.clone();
    next.kind = name.parse::<AdapterKind>()?;
    next.model = None;
    if !endpoint.is_empty() {
        set_endpoint(&mut next, endpoint)?;
    }
    Ok(Some(next))
}

/// `/endpoint [URL]`: the configuration asking at `endpoint`, or `None` (no change) without
/// one.
fn endpoint_config(cfg: &Config, endpoint: &str) -> anyhow::Result<Option<Config>> {
    if endpoint.is_empty() {
        return Ok(None);
    }
    let mut next = cfg.clone();
    set_endpoint(&mut next, endpoint)?;
    Ok(Some(next))
}

/// Switches to the adapter `next` describes, if any, and describes the session's adapter.
fn reconfigure(
    adapter: &mut Box<dyn Adapter>,
    cfg: &mut Config,
    next: Option<Config>,
) -> anyhow::Result<String> {
    if let Some(next) = next {
        switch(adapter, cfg, next)?;
    }
    Ok(describe(adapter.as_ref()))
}

/// `/export FILE`: writes the ledger as JSON Lines to `file`, never onto the ledger or its
/// companions; written beside the target and renamed into place when complete.
fn export(ledger: &Ledger, file: &str) -> anyhow::Result<String> {
    if file.is_empty() {
        return Ok("usage: /export FILE".into());
    }
    let target =
        crate::outfile::OutputFile::create(std::path::Path::new(file), Some(ledger.path()))?;
    let mut f = target.writer()?;
    let mut n = 0;
    ledger.scan(&Filter::default(), &mut |e| {
        f.write_all(e.to_jsonl().as_bytes())
            .map_err(|err| crate::Error::io(file, err))?;
        f.write_all(b"\n")
            .map_err(|err| crate::Error::io(file, err))?;
        n += 1;
        Ok(true)
    })?;
    f.flush().map_err(|err| crate::Error::io(file, err))?;
    drop(f);
    target.commit()?;
    Ok(format!("{n} events written to {file}"))
}

/// Builds the adapter `next` describes and, when that works, makes it the session's.
fn switch(adapter: &mut Box<dyn Adapter>, cfg: &mut Config, next: Config) -> anyhow::Result<()> {
    *adapter = llm::adapter(&next).map_err(crate::Error::from)?;
    *cfg = next;
    Ok(())
}

/// Points `cfg`'s adapter at `endpoint`: the Ollama host, the OpenAI base URL, the cmd
/// command or the scripted adapter's file.
fn set_endpoint(cfg: &mut Config, endpoint: &str) -> anyhow::Result<()> {
    match cfg.kind {
        AdapterKind::Ollama => cfg.ollama_host = endpoint.to_string(),
        AdapterKind::Openai => cfg.openai_base_url = endpoint.to_string(),
        AdapterKind::Cmd => cfg.command = Some(endpoint.to_string()),
        AdapterKind::Scripted => cfg.script = Some(endpoint.into()),
        AdapterKind::Dummy => anyhow::bail!("the dummy adapter asks no one"),
    }
    Ok(())
}

/// "adapter ollama at http://127.0.0.1:11434/api/chat, model llama3.2".
pub(crate) fn describe(adapter: &dyn Adapter) -> String {
    let mut s = format!("adapter {}", adapter.provider());
    let endpoint = adapter.endpoint();
    if !endpoint.is_empty() {
        s.push_str(&format!(" at {endpoint}"));
    }
    if !adapter.model().is_empty() {
        s.push_str(&format!(", model {}", adapter.model()));
    }
    s
}

/// Where a streamed reply is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Screen {
    /// The reply is the output (chat, `--text`).
    Stdout,
    /// A preview beside the JSON Lines on stdout.
    Stderr,
}

/// A reply shown as it is generated: a spinner on stderr (when it is a terminal) until the
/// first piece arrives, then the pieces, marker lines left out unless asked for.
pub(crate) struct Live {
    state: Arc<Mutex<LiveState>>,
}

struct LiveState {
    spinner: Option<ProgressBar>,
    /// `None`: everything is shown, markers included.
    filter: Option<Visible>,
    screen: Screen,
    /// Whether the last character shown ended a line (or nothing was shown).
    at_line_start: bool,
    shown: bool,
}

impl LiveState {
    fn write(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if let Some(s) = self.spinner.take() {
            s.finish_and_clear();
        }
        let r = match self.screen {
            Screen::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(text.as_bytes()).and_then(|()| out.flush())
            }
            Screen::Stderr => {
                let mut err = std::io::stderr().lock();
                err.write_all(text.as_bytes()).and_then(|()| err.flush())
            }
        };
        // A closed stdout does not stop the session (see `say`).
        let _ = r;
        self.at_line_start = text.ends_with('\n');
        self.shown = true;
    }
}

impl Live {
    /// Starts showing a reply on `screen`; `hide_markers` leaves marker lines out, `spinner`
    /// shows one until the first piece (only when stderr is a terminal).
    pub(crate) fn start(screen: Screen, hide_markers: bool, spinner: bool) -> Live {
        let spinner = (spinner && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
                bar.set_style(style);
            }
            bar.set_message("thinking… (Ctrl-C stops)");
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        Live {
            state: Arc::new(Mutex::new(LiveState {
                spinner,
                filter: hide_markers.then(Visible::default),
                screen,
                at_line_start: true,
                shown: false,
            })),
        }
    }

    /// The sink the turn streams into.
    pub(crate) fn sink(&self) -> TextSink {
        let state = self.state.clone();
        TextSink::new(move |piece| {
            let Ok(mut st) = state.lock() else { return };
            let shown = match st.filter.as_mut() {
                Some(f) => f.push(piece),
                None => piece.to_string(),
            };
            st.write(&shown);
        })
    }

    /// Ends the reply: clears the spinner, shows what the filter held back and ends the line.
    /// True when anything was shown.
    pub(crate) fn finish(&self) -> bool {
        let Ok(mut st) = self.state.lock() else {
            return false;
        };
        if let Some(s) = st.spinner.take() {
            s.finish_and_clear();
        }
        let rest = st.filter.as_mut().map(Visible::finish).unwrap_or_default();
        st.write(&rest);
        if !st.at_line_start {
            st.write("\n");
        }
        st.shown
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.finish();
    }
}

/// [`visible`] for a reply that arrives in pieces: a line is shown as soon as its start shows
/// that it is not a marker, a marker line never; blank lines are held back until more text
/// follows them, so that a reply ending in markers ends where its prose does.
#[derive(Debug, Default)]
struct Visible {
    /// The start of the current line while it could still be a marker.
    line: String,
    /// What the current line turned out to be: `Some(true)` shown, `Some(false)` a marker.
    decided: Option<bool>,
    /// Line breaks not shown yet.
    breaks: usize,
}

impl Visible {
    fn push(&mut self, piece: &str) -> String {
        let mut out = String::new();
        for c in piece.chars() {
            if c == '\n' {
                match self.decided {
                    Some(false) => {}
                    Some(true) => self.breaks += 1,
                    None => {
                        let line = std::mem::take(&mut self.line);
                        if line.trim().is_empty() {
                            self.breaks += 1;
                        } else {
                            self.show(&line, &mut out);
                            self.breaks += 1;
                        }
                    }
                }
                self.line.clear();
                self.decided = None;
                continue;
            }
            match self.decided {
                Some(false) => {}
                Some(true) => self.show(c.encode_utf8(&mut [0; 4]), &mut out),
                None => {
                    self.line.push(c);
                    if crate::marker::is_marker_line(&self.line) {
                        self.decided = Some(false);
                        self.line.clear();
                    } else if !crate::marker::could_become_marker(&self.line) {
                        self.decided = Some(true);
                        let line = std::mem::take(&mut self.line);
                        self.show(&line, &mut out);
                    }
                }
            }
        }
        out
    }

    /// Shows `text`, after the line breaks held back.
    fn show(&mut self, text: &str, out: &mut String) {
        out.extend(std::iter::repeat_n('\n', self.breaks));
        self.breaks = 0;
        out.push_str(text);
    }

    /// The end of the reply: a last line that never showed whether it was a marker.
    fn finish(&mut self) -> String {
        let mut out = String::new();
        let line = std::mem::take(&mut self.line);
        if self.decided.is_none() && !line.trim().is_empty() {
            self.show(line.trim_end(), &mut out);
        }
        self.decided = None;
        out
    }
}

/// Prints a line of the session on stdout. A closed stdout does not end the session: what
/// the user types is still appended (a writer never stops consuming its input because nobody
/// reads its output).
fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// Prints a line about the session on stderr: the banner, what a turn changed, errors. A
/// closed stderr does not end the session either (`pmm-turn --chat 2>&1 | head -1`), where
/// `eprintln!` would panic.
fn note(text: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Where the session's lines come from: on a terminal, rustyline edits lines (with history in
/// `~/.pmm_history`); from a pipe or a file, lines are read through the bounded line reader
/// (rustyline's own would grow without limit on an endless line).
struct Input {
    editor: Option<rustyline::DefaultEditor>,
    history: Option<PathBuf>,
    stdin: std::io::StdinLock<'static>,
    buf: Vec<u8>,
    /// Lines read from a pipe or a file so far (for error positions).
    n: u64,
}

impl Input {
    /// Opens the line editor on a terminal, with the history loaded.
    fn open() -> anyhow::Result<Input> {
        let mut editor = if std::io::stdin().is_terminal() {
            Some(rustyline::DefaultEditor::new()?)
        } else {
            None
        };
        let history = std::env::var_os("HOME").map(|h| Path::new(&h).join(".pmm_history"));
        // rustyline reads the history without a bound: only a regular file within the line
        // limit is loaded (not a `~/.pmm_history` linked to /dev/zero).
        let loadable = |h: &Path| {
            std::fs::metadata(h).is_ok_and(|m| m.is_file() && m.len() <= crate::lines::max_line())
        };
        if let (Some(h), Some(rl)) = (&history, editor.as_mut()) {
            if loadable(h) {
                let _ = rl.load_history(h);
            }
        }
        Ok(Input {
            editor,
            history,
            stdin: std::io::stdin().lock(),
            buf: Vec::new(),
            n: 0,
        })
    }

    /// The next line, or `None` at the end of input (Ctrl-D, or Ctrl-C at the prompt). A line
    /// too long or not UTF-8 is bad input.
    fn next_line(&mut self) -> anyhow::Result<Option<String>> {
        if let Some(rl) = self.editor.as_mut() {
            return match rl.readline("you> ") {
                Ok(l) => Ok(Some(l)),
                Err(ReadlineError::Interrupted) | Err(ReadlineError::Eof) => Ok(None),
                Err(e) => Err(e.into()),
            };
        }
        self.n += 1;
        let at = Some(format!("<stdin>:{}", self.n));
        match crate::lines::read_line_default(&mut self.stdin, &mut self.buf) {
            Ok(0) => Ok(None),
            Ok(_) => match std::str::from_utf8(crate::lines::trim_eol(&self.buf)) {
                Ok(l) => Ok(Some(l.to_string())),
                Err(_) => Err(crate::Error::NotUtf8 {
                    at: format!("<stdin>:{}", self.n),
                }
                .into()),
            },
            Err(e) => {
                let msg = match crate::lines::too_long(&e) {
                    Some(t) => t.to_string(),
                    None => e.to_string(),
                };
                Err(crate::Error::bad_input(at, msg).into())
            }
        }
    }

    /// Adds `line` to the editor's history.
    fn remember(&mut self, line: &str) {
        if let Some(rl) = self.editor.as_mut() {
            let _ = rl.add_history_entry(line);
        }
    }

    /// Saves the editor's history (errors ignored: the history is a convenience).
    fn save(&mut self) {
        if let (Some(h), Some(rl)) = (&self.history, self.editor.as_mut()) {
            let _ = rl.save_history(h);
        }
    }
}

/// Runs the interactive session until `/exit` or end of input, with the adapter `cfg`
/// describes. With `stream`, replies are shown as they are generated (after a spinner on
/// stderr).
pub fn run(
    ledger: &mut Ledger,
    mut cfg: Config,
    opts: &Options,
    stream: bool,
    autonomy: Option<Autonomy>,
) -> anyhow::Result<Exit> {
    // The session may switch models (/model, /adapter, /endpoint): it owns its adapter.
    let mut own: Box<dyn Adapter> = llm::adapter(&cfg).map_err(crate::Error::from)?;
    // Ctrl-C (SIGINT) and SIGTERM during a model call cancel that call; at the prompt the line
    // editor reads Ctrl-C as a key, and elsewhere they end the session.
    let cancel = Cancel::new();
    cancel.on_signals()?;
    let mut input = Input::open()?;
    let mut raw = false;
    note(format_args!(
        "pmm — {} ({}). /help for commands, /exit to leave.",
        ledger.path().display(),
        describe(own.as_ref())
    ));
    let gate = Arc::new(Mutex::new(()));
    let ticker = match autonomy {
        Some(a) => Some(Ticker::start(
            ledger.path(),
            &cfg,
            opts,
            a,
            Arc::clone(&gate),
        )?),
        None => None,
    };
    let result = session(
        ledger, &mut own, &mut cfg, opts, stream, &cancel, &mut input, &mut raw, &gate,
    );
    if let Some(t) = ticker {
        t.stop();
    }
    input.save();
    result
}

/// The session's loop: a line, then a slash command or a turn (with the gate held), until
/// `/exit` or end of input.
#[allow(clippy::too_many_arguments)]
fn session(
    ledger: &mut Ledger,
    own: &mut Box<dyn Adapter>,
    cfg: &mut Config,
    opts: &Options,
    stream: bool,
    cancel: &Cancel,
    input: &mut Input,
    raw: &mut bool,
    gate: &Mutex<()>,
) -> anyhow::Result<Exit> {
    while let Some(line) = input.next_line()? {
        if line.trim().is_empty() {
            continue;
        }
        input.remember(&line);
        let _held = gate.lock().unwrap_or_else(|e| e.into_inner());
        if line.trim_start().starts_with('/') {
            match command(ledger, own, cfg, raw, line.trim(), &opts.clock) {
                Ok(Some(t)) => say(&t),
                Ok(None) => break,
                Err(e) => note(format_args!("error: {e:#}")),
            }
            continue;
        }
        let reply = Replies { stream, raw: *raw };
        let (result, streamed) = reply.answer(ledger, own.as_mut(), &line, opts, cancel);
        if reply.report(result, streamed) {
            input.save();
        }
    }
    Ok(Exit::Success)
}

/// `--autonomy`: how often the background ticks come, and how long a tick waits for a
/// ledger another process holds.
#[derive(Debug, Clone, Copy)]
pub struct Autonomy {
    /// A tick at once, then one every this long; also the slots' interval (whole seconds,
    /// at least 1).
    pub every: Duration,
    /// The tick's connection's busy timeout, in milliseconds.
    pub busy_ms: u64,
}

/// The background ticker of `--autonomy` (see the module docs).
struct Ticker {
    stop: Arc<AtomicBool>,
    cancel: Cancel,
    thread: std::thread::JoinHandle<()>,
}

impl Ticker {
    /// Opens the ticker's own connection and adapter (so that a bad setup is refused before
    /// the session starts), then starts its thread.
    fn start(
        path: &Path,
        cfg: &Config,
        opts: &Options,
        a: Autonomy,
        gate: Arc<Mutex<()>>,
    ) -> anyhow::Result<Ticker> {
        let mut ledger = Ledger::open_writer(path, a.busy_ms)?;
        let mut adapter = llm::adapter(cfg).map_err(crate::Error::from)?;
        let (stop, cancel) = (Arc::new(AtomicBool::new(false)), Cancel::new());
        let tick_opts = Options {
            cancel: Some(cancel.clone()),
            stream: None,
            embedder: None,
            ..opts.clone()
        };
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let interval = a.every.as_secs().max(1) as i64;
            while !stopped.load(Ordering::SeqCst) {
                let started = Instant::now();
                {
                    let _held = gate.lock().unwrap_or_else(|e| e.into_inner());
                    if stopped.load(Ordering::SeqCst) {
                        break;
                    }
                    let slot = crate::kernel::Slot::at(tick_opts.clock.now(), interval);
                    let t =
                        crate::kernel::think::run(&mut ledger, adapter.as_mut(), &slot, &tick_opts);
                    note(format_args!("{}", tick_line(&slot, t)));
                }
                while !stopped.load(Ordering::SeqCst) && started.elapsed() < a.every {
                    std::thread::sleep(
                        a.every
                            .saturating_sub(started.elapsed())
                            .min(Duration::from_millis(50)),
                    );
                }
            }
        });
        Ok(Ticker {
            stop,
            cancel,
            thread,
        })
    }

    /// Stops the ticker: a call in flight is cancelled (its tick records the failure), and
    /// the thread is waited for.
    fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cancel.cancel(2);
        let _ = self.thread.join();
    }
}

/// What the session says of a background tick, on stderr.
fn tick_line(
    slot: &crate::kernel::Slot,
    t: Result<crate::kernel::think::Thought, TurnError>,
) -> String {
    match t {
        Ok(t) => {
            let r = t.record();
            let what = r["decision"].as_str().unwrap_or("nothing (already ticked)");
            let asked = if r["think"]["asked"] == true {
                ", the model asked"
            } else {
                ""
            };
            format!("  [autonomy: slot {} {what}{asked}]", slot.slot)
        }
        Err(e) => format!("  [autonomy: slot {} failed: {e}]", slot.slot),
    }
}

/// How a turn's reply is shown.
#[derive(Debug, Clone, Copy)]
struct Replies {
    /// Streamed as it is generated.
    stream: bool,
    /// Marker lines included.
    raw: bool,
}

impl Replies {
    /// Runs the turn on `line`, cancellable by `cancel`; its result, and whether the reply
    /// was streamed.
    fn answer(
        self,
        ledger: &mut Ledger,
        adapter: &mut dyn Adapter,
        line: &str,
        opts: &Options,
        cancel: &Cancel,
    ) -> (Result<turn::TurnDone, TurnError>, bool) {
        cancel.reset();
        let live = self
            .stream
            .then(|| Live::start(Screen::Stdout, !self.raw, true));
        let turn_opts = Options {
            stream: live.as_ref().map(Live::sink),
            cancel: Some(cancel.clone()),
            ..opts.clone()
        };
        let result = {
            let _armed = cancel.arm();
            turn::run(ledger, adapter, line, &turn_opts)
        };
        let streamed = live.is_some_and(|l| {
            l.finish();
            true
        });
        (result, streamed)
    }

    /// Shows a turn's result: the reply (unless `streamed`) and what it changed, or why it
    /// failed. True when the model call was interrupted.
    fn report(self, result: Result<turn::TurnDone, TurnError>, streamed: bool) -> bool {
        match result {
            Ok(o) => {
                if !streamed {
                    say(&if self.raw {
                        o.reply.clone()
                    } else {
                        visible(&o.reply)
                    });
                }
                if o.truncated {
                    say(turn::TRUNCATED);
                }
                if !o.opened.is_empty() || !o.closed.is_empty() || !o.failed_claims.is_empty() {
                    note(format_args!(
                        "  [opened {:?}, closed {:?}, {} claim(s) recorded, {} failed]",
                        o.opened,
                        o.closed,
                        o.valid_claims.len(),
                        o.failed_claims.len()
                    ));
                }
                false
            }
            Err(TurnError::Generation { error, failure, .. })
                if error.reason() == Some("interrupted") =>
            {
                note(format_args!(
                    "interrupted: your message is kept and the interruption recorded as event {} \
                     (Ctrl-C again or Ctrl-D leaves)",
                    failure.id
                ));
                true
            }
            Err(TurnError::Generation { error, failure, .. }) => {
                note(format_args!(
                    "model failed: {error} (recorded as event {}); your message is kept",
                    failure.id
                ));
                false
            }
            Err(e) => {
                note(format_args!("error: {e}"));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_reply_hides_marker_lines() {
        assert_eq!(
            visible("Hello\nCOMMIT: x\n  CLAIM:a=1\nREF: a#1\nbye\n"),
            "Hello\nbye"
        );
    }

    /// Feeds `reply` to a [`Visible`] in pieces of `n` characters.
    fn streamed(reply: &str, n: usize) -> String {
        let mut v = Visible::default();
        let chars: Vec<char> = reply.chars().collect();
        let mut out = String::new();
        for piece in chars.chunks(n) {
            out.push_str(&v.push(&piece.iter().collect::<String>()));
        }
        out + &v.finish()
    }

    #[test]
    fn a_streamed_reply_shows_what_visible_shows() {
        for reply in [
            "Hello\nCOMMIT: x\n  CLAIM:a=1\nREF: a#1\nbye\n",
            "Hello there.\n\nCOMMIT: plan\nCLOSE: abc\n",
            "\n\nCOM is not a marker\nREFERENCE: neither\nREF: but this is",
            "COMMIT: only\nthen prose\n\n\nand more",
            "Hi",
            "CLAI",
        ] {
            for n in [1, 2, 3, 7, 100] {
                assert_eq!(
                    streamed(reply, n),
                    visible(reply),
                    "{reply:?} in pieces of {n}"
                );
            }
        }
    }

    #[test]
    fn the_description_names_adapter_endpoint_and_model() {
        let mut cfg = Config::new(AdapterKind::Ollama);
        cfg.ollama_host = "127.0.0.1:9".into();
        let a = llm::adapter(&cfg).unwrap();
        assert_eq!(
            describe(a.as_ref()),
            "adapter ollama at http://127.0.0.1:9/api/chat, model llama3.2"
        );
        let d = llm::adapter(&Config::new(AdapterKind::Dummy)).unwrap();
        assert_eq!(describe(d.as_ref()), "adapter dummy");
    }

    #[test]
    fn a_slash_command_splits_into_name_words_and_rest() {
        assert_eq!(
            parse_slash("/Adapter  cmd   ./m.sh  --x 'a  b'"),
            Slash {
                name: "/adapter".into(),
                arg: "cmd ./m.sh --x 'a b'".into(),
                rest: "cmd   ./m.sh  --x 'a  b'",
            }
        );
        assert_eq!(
            parse_slash("/exit"),
            Slash {
                name: "/exit".into(),
                arg: String::new(),
                rest: "",
            }
        );
    }

    #[test]
    fn model_adapter_and_endpoint_commands_make_the_next_config() {
        let mut cfg = Config::new(AdapterKind::Ollama);
        cfg.model = Some("llama3.2".into());
        assert!(model_config(&cfg, "").is_none());
        assert_eq!(
            model_config(&cfg, "qwen").unwrap().model.as_deref(),
            Some("qwen")
        );

        assert!(adapter_config(&cfg, "").unwrap().is_none());
        let next = adapter_config(&cfg, "cmd   ./m.sh  --x").unwrap().unwrap();
        assert_eq!(next.kind, AdapterKind::Cmd);
        assert_eq!(next.model, None);
        assert_eq!(next.command.as_deref(), Some("./m.sh  --x"));
        assert!(adapter_config(&cfg, "nosuch").is_err());
        assert!(adapter_config(&cfg, "dummy somewhere").is_err());
        assert_eq!(
            adapter_config(&cfg, "dummy").unwrap().unwrap().kind,
            AdapterKind::Dummy
        );

        assert!(endpoint_config(&cfg, "").unwrap().is_none());
        let next = endpoint_config(&cfg, "http://127.0.0.1:9")
            .unwrap()
            .unwrap();
        assert_eq!(next.ollama_host, "http://127.0.0.1:9");
        assert_eq!(next.model.as_deref(), Some("llama3.2"));
        assert!(endpoint_config(&Config::new(AdapterKind::Dummy), "x").is_err());
    }
}
