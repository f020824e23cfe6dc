//! What every program shares: flags, the stdout writer, the error line, exit codes, progress
//! bars (SPEC §3). The only module besides `cmd` that touches stdio or the exit status.

pub mod adapter;
pub mod duration;
pub mod embed;
pub mod line;
pub mod refenv;

use crate::error::ExitStatus;
use crate::event::Clock;
use crate::store::{DEFAULT_BUSY_TIMEOUT_MS, DEFAULT_DB};
use clap::builder::TypedValueParser as _;
use clap::Args;
use clap_complete::Shell;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// How a program ended when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Exit 0.
    Success,
    /// Exit 1: the tool worked and the answer is negative (findings, a refused write).
    Negative,
}

/// `--db`: which ledger.
#[derive(Debug, Clone, Args)]
pub struct LedgerArgs {
    /// The ledger: a SQLite file's path, or a PostgreSQL URL (postgres://USER@HOST/DB, its
    /// indexes cached on this host under PMM_CACHE_DIR); any other URL or a `file:` URI is
    /// refused [default: .data/pmmdb/pmm.db]
    #[arg(long, env = "PMM_DB", value_name = "PATH|URL", global = true, value_parser = db_path())]
    pub db: Option<PathBuf>,
}

impl LedgerArgs {
    /// `--db`, else `$PMM_DB`, else the default under the current directory.
    pub fn path(&self) -> PathBuf {
        self.db.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_DB))
    }
}

/// `--db`'s parser: a file path, or a PostgreSQL URL (`postgres://`, `postgresql://`) checked
/// here, so that a bad one is exit 2 before anything opens; never any other URL or an SQLite
/// URI taken for a path (it would create a folder named `file:`: [`crate::store::parse_db`]).
fn db_path() -> impl clap::builder::TypedValueParser<Value = PathBuf> {
    clap::builder::OsStringValueParser::new().try_map(|s| {
        let text = s.to_string_lossy();
        if crate::store::is_postgres_url(&text) {
            return crate::store::check_url(&text).map(|()| PathBuf::from(&s));
        }
        crate::store::parse_db(&text)
    })
}

/// `--now`: the pinned clock.
#[derive(Debug, Clone, Args)]
pub struct ClockArgs {
    /// Pin the clock to this RFC 3339 time (for reproducible ledgers) [default: the system clock]
    #[arg(long, env = "PMM_NOW", value_name = "TIME", value_parser = parse_clock)]
    pub now: Option<Clock>,
}

impl ClockArgs {
    /// The clock to use.
    pub fn clock(&self) -> Clock {
        self.now.unwrap_or(Clock::System)
    }
}

fn parse_clock(s: &str) -> Result<Clock, crate::event::EventError> {
    Clock::pinned(s)
}

/// The longest `--busy-timeout` SQLite takes (its busy handler counts milliseconds in a C
/// `int`): about 24.8 days.
pub const MAX_BUSY_TIMEOUT_MS: u64 = i32::MAX as u64;

/// `--busy-timeout`: how long a writer waits for the lock.
#[derive(Debug, Clone, Args)]
pub struct WriteArgs {
    /// How long to wait for another writer's lock before giving up, in milliseconds
    /// (0 to 2147483647)
    #[arg(
        long,
        value_name = "MS",
        default_value_t = DEFAULT_BUSY_TIMEOUT_MS,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i64).range(0..=MAX_BUSY_TIMEOUT_MS as i64).map(|v| v as u64)
    )]
    pub busy_timeout: u64,
}

/// Flags every program has.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Show no progress bar
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// Print a shell completion script for this program and exit
    #[arg(long, value_name = "SHELL")]
    pub completions: Option<Shell>,
    /// Refuse an input line longer than BYTES as bad input (exit 2): JSON Lines, stdin
    /// messages, anchors, scripts, .env (K, M, G suffixes) [default: 256M]
    #[arg(long, env = "PMM_MAX_LINE", value_name = "BYTES", value_parser = crate::lines::parse_size, global = true)]
    pub max_line: Option<u64>,
}

/// What a program's `Args` gives the shared runner.
pub trait Program: clap::Parser {
    /// The shared flags.
    fn common(&self) -> &CommonArgs;
    /// Whether this run embeds one text at a time (a turn, a recall's query), so an
    /// in-process model runs each on one thread ([`crate::llm::embed::single_text_threads`]).
    fn embeds_single_texts(&self) -> bool {
        false
    }
}

/// Runs a program: loads `.env`, parses arguments, runs, reports, and turns the result into
/// the exit status of SPEC §3.
pub fn main<A: Program>(name: &str, run: fn(A) -> anyhow::Result<Exit>) -> ExitCode {
    // A .env file in the current directory fills in variables that are not set; it never
    // overrides the environment.
    let from_dotenv = match load_dotenv(Path::new(".env")) {
        Ok(names) => names,
        Err(e) => return report(name, &e.into()),
    };
    // The reference's names: honoured where they mean the same, otherwise named.
    for w in refenv::apply(&from_dotenv) {
        let _ = writeln!(io::stderr(), "{name}: warning: {w}");
    }
    let matches = match A::command().try_get_matches() {
        Ok(m) => m,
        Err(e) if !e.use_stderr() => {
            // --help, --version: not errors.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => return usage_error(name, &e),
    };
    let args = match A::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => return usage_error(name, &e),
    };
    if args.embeds_single_texts() {
        // Before any thread starts: it sets a variable of this process.
        crate::llm::embed::single_text_threads();
    }
    if let Some(bytes) = args.common().max_line {
        crate::lines::set_max_line(bytes);
    }
    if let Some(shell) = args.common().completions {
        let mut cmd = A::command();
        clap_complete::generate(shell, &mut cmd, name, &mut io::stdout());
        return ExitCode::SUCCESS;
    }
    let outcome = run(args);
    // What the store could not do wholly (a cache behind its server), said once at the end.
    for w in crate::store::notices::take() {
        let _ = writeln!(io::stderr(), "{name}: warning: {w}");
    }
    match outcome {
        Ok(Exit::Success) => ExitCode::SUCCESS,
        Ok(Exit::Negative) => ExitCode::from(1),
        Err(e) => report(name, &e),
    }
}

/// Loads `.env` (when there is one) for the variables that are not set, reading it through the
/// bounded whole-file reader: a line longer than `$PMM_MAX_LINE` (a `.env` linked to
/// `/dev/zero`), or a file longer than that in all, is bad input, exit 2. A `.env` that exists
/// but cannot be read, or has a line `dotenvy` cannot parse, is an error naming the file (and
/// the line), exit 2, and nothing of it is loaded: a setting silently dropped would send a
/// program to the wrong ledger or model. A directory named `.env` (a Python virtualenv's
/// usual name) is no file of settings. The names the file sets (whether or not the
/// environment already had them).
fn load_dotenv(path: &Path) -> crate::Result<Vec<String>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(crate::Error::io(path, e)),
    };
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Ok(Vec::new());
    }
    let limit = crate::lines::max_line();
    let text =
        crate::lines::read_bounded(&mut io::BufReader::new(file), limit, limit).map_err(|e| {
            if e.over_limit() {
                crate::Error::bad_input(Some(e.at(&path.display().to_string())), e.to_string())
            } else {
                crate::Error::io(path, e.error)
            }
        })?;
    let text = crate::lines::lines_of(&text)
        .collect::<Vec<_>>()
        .join(&b'\n');
    // `dotenvy::from_read` skips a byte-order mark; its iterator does not.
    let text = text.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&text);
    let mut names = Vec::new();
    for item in dotenvy::from_read_iter(text) {
        match item {
            Ok((name, _)) => names.push(name),
            Err(e) => return Err(dotenv_error(path, text, e)),
        }
    }
    dotenvy::from_read(text).map_err(|e| dotenv_error(path, text, e))?;
    Ok(names)
}

/// A `.env` that `dotenvy` refused, named with the line where it failed.
fn dotenv_error(path: &Path, text: &[u8], e: dotenvy::Error) -> crate::Error {
    match e {
        dotenvy::Error::LineParse(line, _) => {
            // The logical line as dotenvy read it (several lines when a quote is left open):
            // its first line's number in the file.
            let text = String::from_utf8_lossy(text);
            let first = line.lines().next().unwrap_or_default();
            let number = text
                .lines()
                .position(|l| l == first)
                .map_or(String::new(), |n| format!(":{}", n + 1));
            let shown: String = first.chars().take(80).collect();
            crate::Error::bad_input(
                Some(format!("{}{number}", path.display())),
                format!("cannot parse '{shown}' (a line is NAME=value, a # comment or empty)"),
            )
        }
        dotenvy::Error::Io(io) => crate::Error::io(path, io),
        other => crate::Error::bad_input(Some(path.display().to_string()), other),
    }
}

/// A key, signed checkpoint or proof file named by a flag (`-`: stdin), read whole through
/// the bounded reader: more than [`crate::lines::MAX_SMALL_FILE`] bytes (`/dev/zero`, `yes |`)
/// is bad input, exit 2, after reading at most one byte more. Every such flag of every
/// program reads through this.
pub fn read_small_file(path: &Path) -> crate::Result<String> {
    let name = if path == Path::new("-") {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    };
    let limit = crate::lines::MAX_SMALL_FILE;
    let read = if path == Path::new("-") {
        crate::lines::read_bounded(&mut io::stdin().lock(), u64::MAX, limit)
    } else {
        std::fs::File::open(path)
            .map_err(|error| crate::lines::ReadError { line: None, error })
            .and_then(|f| crate::lines::read_bounded(&mut io::BufReader::new(f), u64::MAX, limit))
    };
    let bytes = read.map_err(|e| {
        if e.over_limit() {
            crate::Error::bad_input(Some(e.at(&name)), e.to_string())
        } else {
            crate::Error::io(Path::new(&name), e.error)
        }
    })?;
    String::from_utf8(bytes).map_err(|_| crate::Error::NotUtf8 { at: name })
}

/// Prints a usage error (bad flag, bad value, bad `$PMM_NOW`) in the one-line form of SPEC §3,
/// `pmm-<tool>: error: <what>`, instead of clap's multi-line block; exit 2.
pub fn usage_error(name: &str, e: &clap::Error) -> ExitCode {
    let text = e.render().to_string();
    // Clap's first paragraph says what is wrong ("error: invalid value ..." and maybe a
    // "[possible values: ...]" line); the rest is usage and tips.
    let what: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect();
    let what = what.join(" ");
    let what = what.strip_prefix("error: ").unwrap_or(&what);
    let what = masked(what);
    let _ = writeln!(io::stderr(), "{name}: error: {what} (see '{name} --help')");
    ExitCode::from(2)
}

/// `text` with every PostgreSQL URL in it shown without its password (clap's errors repeat a
/// bad `--db` value as given; a library error may name a URL): the last guard before stderr.
pub fn masked(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    let mut from = 0;
    while let Some(i) = lower[from..].find("postgres").map(|i| i + from) {
        let rest = &lower[i..];
        if !(rest.starts_with("postgres://") || rest.starts_with("postgresql://")) {
            from = i + "postgres".len();
            continue;
        }
        // The URL runs to the quote or white space that ends it.
        let end = text[i..]
            .find(|c: char| c.is_whitespace() || c == '\'' || c == '"')
            .map_or(text.len(), |n| i + n);
        out.push_str(&text[last..i]);
        out.push_str(&crate::store::shown_url(&text[i..end]));
        last = end;
        from = end;
    }
    out.push_str(&text[last..]);
    out
}

/// Prints `pmm-<tool>: error: <cause chain>` and returns the exit status for `e`.
pub fn report(name: &str, e: &anyhow::Error) -> ExitCode {
    if is_broken_pipe(e) {
        return ExitCode::SUCCESS;
    }
    let code = exit_code(e);
    let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
    let mut msg = String::new();
    for part in chain {
        // Context lines often repeat their source's text; say each thing once.
        if !msg.contains(&part) {
            if !msg.is_empty() {
                msg.push_str(": ");
            }
            msg.push_str(&part);
        }
    }
    // One line, whatever RUST_BACKTRACE says: an error is not a bug. Real panics still print
    // their backtrace through the standard panic hook.
    let _ = writeln!(
        io::stderr(),
        "{name}: error: {}",
        masked(&msg.replace('\n', " "))
    );
    ExitCode::from(code)
}

/// The exit status for an error that is not a broken pipe: the library error's own
/// ([`ExitStatus`]; a module's error, a turn's or a model's, became a [`crate::Error`] that keeps
/// its status on the way up), else 2.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    e.chain()
        .find_map(|c| c.downcast_ref::<crate::Error>())
        .map_or(2, ExitStatus::exit_code)
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<crate::Error>().is_some_and(|pe| {
                matches!(pe, crate::Error::Io { source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
            })
    })
}

/// Buffered stdout for JSON Lines. Errors (a closed pipe) surface on write, and the runner
/// turns a broken pipe into a quiet exit 0. A writer's stdout ([`Out::for_writer`]) instead
/// stops printing when its reader goes away and lets the writer go on (SPEC §3: a writer never
/// silently stops appending what it was given because nobody reads its output).
pub struct Out {
    inner: io::BufWriter<io::StdoutLock<'static>>,
    line: Vec<u8>,
    /// Set for writers: a closed pipe ends the printing, not the program.
    keep_going: bool,
    /// The pipe closed under a writer: nothing more is printed.
    closed: bool,
}

impl Default for Out {
    fn default() -> Self {
        Self::new()
    }
}

impl Out {
    /// Locks stdout.
    pub fn new() -> Self {
        Out {
            inner: io::BufWriter::with_capacity(1 << 16, io::stdout().lock()),
            line: Vec::with_capacity(4096),
            keep_going: false,
            closed: false,
        }
    }

    /// Locks stdout for a program that appends what it reads (`pmm-append`, `pmm-turn`): when
    /// stdout is closed (`pmm-append | head -1`), printing stops quietly and every write after
    /// that succeeds without output, so the program goes on appending its input (like
    /// `tee -p`) and exits 0 when it is done.
    pub fn for_writer() -> Self {
        Out {
            keep_going: true,
            ..Self::new()
        }
    }

    fn guard(&mut self, r: io::Result<()>) -> io::Result<()> {
        match r {
            Err(e) if self.keep_going && e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            r => r,
        }
    }

    /// Writes one record as a JSON line.
    pub fn record<T: serde::Serialize>(&mut self, value: &T) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        self.line.clear();
        serde_json::to_writer(&mut self.line, value).map_err(io::Error::other)?;
        self.line.push(b'\n');
        let r = self.inner.write_all(&self.line);
        self.guard(r)
    }

    /// Writes one event as a JSON line.
    pub fn event(&mut self, ev: &crate::event::Event) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        self.line.clear();
        ev.write_jsonl(&mut self.line);
        self.line.push(b'\n');
        let r = self.inner.write_all(&self.line);
        self.guard(r)
    }

    /// Lets `f` write straight into the buffered stdout (for a record too large to build in
    /// memory first).
    pub fn with_writer(
        &mut self,
        f: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = f(&mut self.inner);
        self.guard(r)
    }

    /// Writes raw bytes.
    pub fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.inner.write_all(bytes);
        self.guard(r)
    }

    /// Flushes (call it after each record when a reader may be waiting: `tail -f` pipelines).
    pub fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.inner.flush();
        self.guard(r)
    }
}

/// True when nobody reads stdout any more (the reader of our pipe has gone away). Lets a
/// long wait — `pmm-replay --follow | head -1` with no new events — end as soon as the pipe
/// closes instead of at the next write.
pub fn stdout_closed() -> bool {
    let mut fds = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a zero timeout; poll only reads and writes that struct.
    let n = unsafe { libc::poll(&mut fds, 1, 0) };
    n > 0 && fds.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// A flag that turns true on SIGINT or SIGTERM, for loops that must end cleanly between two
/// steps (`--follow`, `--every`).
pub fn stop_flag() -> std::io::Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag.clone())?;
    }
    Ok(flag)
}

/// A progress bar on stderr when stderr is a terminal and `--quiet` was not given; a hidden
/// one otherwise. `len` is the amount of work (bytes or events).
pub fn progress(len: u64, quiet: bool, what: &str) -> ProgressBar {
    if quiet || !io::stderr().is_terminal() || len == 0 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    let template = if std::env::var_os("NO_COLOR").is_some() {
        "{msg} [{bar:40}] {percent}% {elapsed_precise}"
    } else {
        "{msg} [{bar:40.cyan/blue}] {percent}% {elapsed_precise}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    // Only draw for work that takes a while.
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(4));
    bar
}

/// How far behind the full-text index must be for a writer to show its build as a bar.
pub const INDEX_BAR_AFTER: u64 = 10_000;

/// Opens a ledger for writing. The first time a writer opens an older ledger (or one another
/// program appended much to), the full-text index is built before anything else, with a
/// progress bar; every write brings it up to date in its own transaction anyway.
pub fn open_writer(
    path: &std::path::Path,
    busy_ms: u64,
    quiet: bool,
) -> crate::Result<crate::store::Ledger> {
    let mut ledger = crate::store::Ledger::open_writer(path, busy_ms)?;
    if let Some(lag) = ledger.lag(crate::store::Derived::Text)? {
        if lag >= INDEX_BAR_AFTER {
            let bar = progress(lag, quiet, "indexing for recall");
            ledger.catch_up_index(&mut |done, _| bar.set_position(done))?;
            bar.finish_and_clear();
        }
    }
    Ok(ledger)
}

/// The man page of a program, rendered from its clap definition (the same text as `--help`).
/// The sections of the long help's epilogue (`EXAMPLES:`, `EXIT STATUS:`, ...) become man
/// sections, set without filling so that examples keep their lines.
pub fn man_page(cmd: clap::Command) -> io::Result<Vec<u8>> {
    let epilogue = cmd
        .get_after_long_help()
        .map(|h| h.to_string())
        .unwrap_or_default();
    let man = clap_mangen::Man::new(
        cmd.clone()
            .after_long_help(None::<&str>)
            .after_help(None::<&str>),
    )
    .date("2026-11")
    .source(format!("pmm {}", env!("CARGO_PKG_VERSION")))
    .manual("pmm manual");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    // The commands with their one-line summaries (clap_mangen's own section would point each
    // at a page `<program>-<command>(1)`, which only pmm's programs have).
    let commands: Vec<&clap::Command> =
        cmd.get_subcommands().filter(|c| !c.is_hide_set()).collect();
    if !commands.is_empty() {
        writeln!(out, ".SH COMMANDS")?;
        for c in commands {
            writeln!(out, ".TP")?;
            writeln!(out, "\\fB{}\\fR", roff_line(c.get_name()))?;
            if let Some(about) = c.get_about() {
                writeln!(out, "{}", roff_line(&about.to_string()))?;
            }
        }
    }
    for (title, body) in epilogue_sections(&epilogue) {
        writeln!(out, ".SH \"{}\"", title.replace('"', ""))?;
        writeln!(out, ".nf")?;
        for line in body.lines() {
            writeln!(out, "{}", roff_line(line))?;
        }
        writeln!(out, ".fi")?;
    }
    man.render_version_section(&mut out)?;
    Ok(out)
}

/// Splits an epilogue into `(TITLE, body)` at lines like `EXIT STATUS:`.
fn epilogue_sections(text: &str) -> Vec<(String, String)> {
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let is_title = !line.starts_with(' ')
            && line.ends_with(':')
            && line.chars().any(|c| c.is_ascii_uppercase())
            && !line.chars().any(|c| c.is_ascii_lowercase());
        if is_title {
            sections.push((line.trim_end_matches(':').to_string(), String::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    sections
}

/// Escapes one line for roff: backslashes, and a leading `.` or `'` that would be a request.
fn roff_line(line: &str) -> String {
    let escaped = line.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::LlmError;
    use crate::turn::TurnError;

    /// Issue 44, N1: a message that repeats a `--db` URL (clap's "invalid value '…'") shows it
    /// without its password, wherever it stands and however it is quoted.
    #[test]
    fn messages_show_urls_without_passwords() {
        let m = masked(
            "invalid value 'postgres://u:S3CRET@h/db?x=1' for '--db': at PostgreSQL://v:S3CRET@h and \"postgresql://u@h/d?password=S3CRET\"",
        );
        assert!(!m.contains("S3CRET"), "{m}");
        assert!(m.contains("'postgres://u:***@h/db?x=1'"), "{m}");
        assert_eq!(
            masked("nothing to see, postgres is a word"),
            "nothing to see, postgres is a word"
        );
    }

    fn preflight() -> LlmError {
        LlmError::Preflight {
            provider: "ollama".into(),
            endpoint: "http://127.0.0.1:1".into(),
            detail: "connection refused".into(),
        }
    }

    fn generation(error: LlmError) -> TurnError {
        TurnError::Generation {
            error,
            events: vec![],
            failure: Box::new(crate::event::Event::sample(
                7,
                "generation_failure",
                "",
                "{}",
            )),
        }
    }

    #[test]
    fn exit_codes_come_from_the_errors_themselves() {
        let code = |e: anyhow::Error| exit_code(&e);
        assert_eq!(code(anyhow::anyhow!("plain")), 2);
        assert_eq!(code(crate::Error::bad_input(None, "x").into()), 2);
        assert_eq!(code(crate::Error::NotFound("x".into()).into()), 1);
        // Under a context line too.
        let e = anyhow::Error::new(crate::Error::NotFound("x".into())).context("<stdin>:3");
        assert_eq!(code(e), 1);
        assert_eq!(code(crate::Error::from(preflight()).into()), 3);
        assert_eq!(
            code(crate::Error::from(LlmError::Config("bad".into())).into()),
            2
        );
        assert_eq!(code(crate::Error::from(generation(preflight())).into()), 3);
        // A failed generation is exit 3 whatever the model's error was.
        assert_eq!(
            code(crate::Error::from(generation(LlmError::Config("bad".into()))).into()),
            3
        );
        for (signal, status) in [(2, 130), (15, 143)] {
            let interrupted = LlmError::Interrupted {
                provider: "ollama".into(),
                endpoint: String::new(),
                signal,
            };
            assert_eq!(
                code(crate::Error::from(generation(interrupted)).into()),
                status
            );
        }
        // A turn's store error is the store error, with its own status.
        let store = TurnError::Store(crate::Error::NotFound("x".into()));
        assert_eq!(code(crate::Error::from(store).into()), 1);
    }

    #[test]
    fn a_module_error_reads_as_itself() {
        let e = generation(preflight());
        let text = e.to_string();
        let wrapped = crate::Error::from(e);
        assert_eq!(wrapped.to_string(), text);
        let any: anyhow::Error = wrapped.into();
        assert_eq!(any.chain().count(), 1);
        assert_eq!(format!("{any:#}"), text);
    }
}
