//! `pmm-turn`: one conversational turn per message, through a model adapter; `chat`: the
//! interactive chat (`--chat`) and `admin`, its `/` commands.

mod admin;
pub mod chat;

use crate::cli::adapter::AdapterArgs;
use crate::cli::{ClockArgs, CommonArgs, Exit, LedgerArgs, Out, Program, WriteArgs};
use crate::llm::{Adapter, Cancel, Config};
use crate::store::Ledger;
use crate::turn::{self, Options, TurnError};
use crate::Error;
use chat::{Live, Screen};
use std::io::{BufRead, IsTerminal};

const AFTER_HELP: &str = "\
EXAMPLES:
  One turn with a local Ollama model; print only the reply:
    pmm-turn --adapter ollama --model llama3.2 --text 'Who are you?'
  An OpenAI-compatible server (llama.cpp, vLLM, LM Studio):
    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 pmm-turn --adapter openai --model local 'hello'
  The same, with a small model kept from running on (at most 256 tokens a reply):
    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 pmm-turn --adapter openai --model local --max-tokens 256 'hi'
  A conversation from a file, one turn per line, replies scripted (offline, reproducible):
    pmm-turn --adapter scripted --script replies.jsonl --plain < questions.txt
  Follow what the turns commit to:
    pmm-turn --adapter ollama 'Plan the week' | jq -c 'select(.kind==\"commitment_open\") | .meta.text'
  Talk interactively (slash commands: /help), the reply streamed as it is generated:
    pmm-turn --chat --adapter ollama
  The same, the agent thinking on its own between turns (a tick at once, then every minute):
    pmm-turn --chat --adapter ollama --autonomy 60s
  Stream one reply, then keep its JSON Lines in a file:
    pmm-turn --adapter ollama --stream always 'Tell me a story' > turn.jsonl

INPUT:
  The message argument is one turn. Without it, stdin is read: one turn per line, each a JSON
  object {\"content\": STRING} (as pmm-replay prints user messages), or plain text with --plain.
  A line longer than --max-line (default 256M) is bad input, exit 2. Turns read from stdin
  (and --chat) load the embedding model once and keep the vector packs in memory between
  turns (see pmm-recall --help, --lines).

OUTPUT:
  Per turn, the events it appended as JSON Lines, then
  {\"type\":\"turn\",\"reply\",\"opened\",\"closed\",\"claims\":{\"valid\",\"failed\"},\"events\",\"first_id\",\"last_id\",\"rows_read\"},
  with \"truncated\":true when a token limit cut the reply (the provider's finish_reason is
  in the reply's meta) and \"markers_echoed\":N when marker lines only repeated the system
  prompt (they are not acted on). --text prints only the reply, then [truncated] if it was
  cut. A closed stdout (pmm-turn --plain < q.txt | head -1) stops the printing, not the
  turns: every line is still a turn, and the exit status is as if it had been read. In
  --chat, /export FILE writes the ledger as JSON Lines beside FILE and renames it in; FILE
  may not be the ledger or its -wal, -shm or -journal file.

STREAMING:
  When stdout is a terminal (or with --stream always) the reply is shown as it is generated,
  after a spinner on stderr: on stdout in --chat and with --text, else on stderr beside the
  JSON Lines. Ollama is asked for \"stream\":true (JSON lines), OpenAI-compatible servers for
  server-sent events with usage. The reply is appended to the ledger once, whole, when it
  ends; a stream cut short is a model failure (exit 3). Piped stdout asks for no stream.

INTERRUPTS:
  SIGINT (Ctrl-C) or SIGTERM during a turn cancels its model call: the turn appends a
  generation_failure whose meta says \"reason\":\"interrupted\" (the message is kept), and
  pmm-turn exits 130 (SIGINT) or 143 (SIGTERM). A second signal ends it at once. In --chat,
  Ctrl-C cancels the call and returns to the prompt; Ctrl-C at the prompt, or Ctrl-D, leaves.

MARKERS (in the model's reply, one per line; see docs/turn.md):
  COMMIT: <text>   CLOSE: <cid>   CLAIM:<type>=<json>   REFLECT:<json>   REF: <ledger>#<id>

EXIT STATUS:
  0  every turn was answered and written
  1  the ledger's write policy forbade one of the turn's events: that transaction was rolled
     back and a violation event records the refusal
  2  bad input (an empty message), no adapter chosen, bad adapter setup (missing
     --script/--command, an OPENAI_BASE_URL or OLLAMA_HOST that is not a URL), locked or
     unreadable ledger
  3  the model cannot be asked, found by a check before the turn (connection refused,
     unknown model, rejected key, a server speaking another API): nothing was written, and
     the error says what to do; or the model failed after the request was accepted (timed
     out, errors after retries): the user message and a generation_failure event are in
     the ledger
  130, 143  SIGINT or SIGTERM during a turn; the user message and a generation_failure
     (reason interrupted) are in the ledger

ENVIRONMENT:
  PMM_DB           the ledger when --db is not given (default .data/pmmdb/pmm.db)
  PMM_NOW          pin the clock (RFC 3339)
  PMM_ADAPTER      the adapter when --adapter is not given (one of them is required)
  PMM_MODEL        the model when --model is not given
  OLLAMA_HOST      Ollama's address (default http://127.0.0.1:11434)
  OPENAI_BASE_URL  the OpenAI-compatible API (default https://api.openai.com/v1)
  OPENAI_API_KEY   its key (never written to the ledger, stdout or stderr)
  PMM_EMBED_PROVIDER, PMM_EMBED_MODEL, PMM_EMBED_URL, PMM_EMBED_API_KEY
                   semantic recall's embedding model (see pmm-recall --help)
  RAYON_NUM_THREADS
                   threads of the in-process embedding model (1 unless set; not passed on
                   to --adapter cmd's command)
  A .env file in the current directory is read for variables that are not set.";

/// Run conversational turns: message in, the turn's ledger events out.
///
/// Each turn appends the user's message (committed before the model is called, so it is never
/// lost), retrieves a bounded context from the ledger, asks the model, and appends the reply
/// and everything that follows from it — claims, commitments, references, the retrieval record,
/// metrics, reflections, summaries — in one transaction. Markers are read from the model's
/// reply only, never from the user's message.
#[derive(Debug, clap::Parser)]
#[command(name = "pmm-turn", version, after_long_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    clock: ClockArgs,
    #[command(flatten)]
    write: WriteArgs,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    embed: crate::cli::embed::EmbedArgs,

    /// The user's message (one turn); without it, stdin is read, one turn per line
    #[arg(value_name = "MESSAGE")]
    message: Option<String>,
    /// Stdin lines are plain text, not JSON objects
    #[arg(long)]
    plain: bool,
    /// Print only the reply text
    #[arg(long)]
    text: bool,
    /// Talk interactively (line editing, history, slash commands); the default when no message
    /// is given and stdin is a terminal
    #[arg(long, conflicts_with_all = ["message", "plain"])]
    chat: bool,
    /// With --chat: tick the ledger in the background, at once and then every DURATION (10s,
    /// 1m; also the slots' interval), each a thinking tick with the session's adapter, never
    /// in the middle of a turn (see pmm-tick --help)
    #[arg(long, value_name = "DURATION", requires = "chat", value_parser = crate::cli::duration::parse)]
    autonomy: Option<std::time::Duration>,
    #[command(flatten)]
    llm: AdapterArgs,

    /// Characters of text recalled from the whole ledger for this turn (the hybrid strategy;
    /// default: the retrieval config's budget, 8000). The newest messages come on top of it,
    /// as chat history
    #[arg(long, value_name = "CHARS", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    budget: Option<u64>,
    /// Show the reply as it is generated (ollama and openai ask for a streamed answer): auto
    /// when stdout is a terminal. The reply goes to stdout in --chat and with --text, else to
    /// stderr beside the JSON Lines; it is appended to the ledger once, whole, when it ends
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = Stream::Auto)]
    stream: Stream,
}

/// When to stream the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Stream {
    /// When stdout is a terminal.
    Auto,
    /// Always.
    Always,
    /// Never: one answer, read whole.
    Never,
}

impl Program for Args {
    fn common(&self) -> &CommonArgs {
        &self.common
    }
    fn embeds_single_texts(&self) -> bool {
        true
    }
}

/// What `pmm-turn` says when no adapter was chosen (exit 2): answering with `dummy`, whose
/// canned reply opens a commitment, would put a reply nobody asked for into the ledger.
const NO_ADAPTER: &str = "no model adapter chosen: pass --adapter ollama, openai, cmd, scripted \
or dummy, or set PMM_ADAPTER (in the environment or a .env file); --adapter dummy answers with a \
canned echo, for trying pmm without a model";

/// Refuses a message that is empty or only whitespace (exit 2): a turn on nothing would append
/// an empty `user_message` and ask a model to answer it.
fn check_message(msg: &str, at: Option<String>) -> Result<(), Error> {
    if msg.trim().is_empty() {
        return Err(Error::bad_input(
            at,
            "the message is empty (a turn needs some text)",
        ));
    }
    Ok(())
}

impl Args {
    fn config(&self) -> anyhow::Result<Config> {
        self.llm.config(NO_ADAPTER)
    }

    fn options(&self) -> Options {
        Options {
            temperature: self.llm.temperature,
            top_p: self.llm.top_p,
            seed: self.llm.seed,
            max_tokens: self.llm.max_tokens,
            budget: self.budget.map(|b| b as usize),
            clock: self.clock.clock(),
            stream: None,
            cancel: None,
            embedder: None,
        }
    }

    /// Whether replies are streamed.
    fn streams(&self) -> bool {
        match self.stream {
            Stream::Auto => std::io::stdout().is_terminal(),
            Stream::Always => true,
            Stream::Never => false,
        }
    }
}

/// Prints one turn's outcome (with `--text`, only what streaming has not shown yet).
fn print(
    out: &mut Out,
    text_only: bool,
    streamed: bool,
    outcome: &turn::TurnDone,
) -> std::io::Result<()> {
    if text_only && streamed {
        // The reply is on stdout already, its line ended.
    } else if text_only {
        out.raw(outcome.reply.as_bytes())?;
        if !outcome.reply.ends_with('\n') {
            out.raw(b"\n")?;
        }
        if outcome.truncated {
            out.raw(format!("{}\n", turn::TRUNCATED).as_bytes())?;
        }
    } else {
        for e in &outcome.events {
            out.event(e)?;
        }
        out.record(&outcome.record())?;
    }
    out.flush()
}

/// Parses one stdin line into a message.
fn message_of(line: &str, plain: bool, at: String) -> Result<String, Error> {
    if plain {
        return Ok(line.to_string());
    }
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(o)) => match o.get("content") {
            Some(serde_json::Value::String(s)) => Ok(s.clone()),
            _ => Err(Error::bad_input(
                Some(at),
                "expected {\"content\": STRING} (use --plain for plain text)",
            )),
        },
        _ => Err(Error::bad_input(
            Some(at),
            "not a JSON object {\"content\": STRING} (use --plain for plain text)",
        )),
    }
}

/// Runs `pmm-turn`.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    if let Some(msg) = &args.message {
        check_message(msg, None)?;
    }
    let (cfg, mut adapter) = args.adapter()?;
    let path = args.ledger.path();
    let chat = args.chats(std::io::stdin().is_terminal());
    // A new ledger has no retrieval config: its model (flags, environment) is loaded before
    // the file is created, so a bad model directory leaves nothing behind.
    let fresh = !crate::store::exists(&path);
    let early = if fresh { args.embed.open_new()? } else { None };
    let mut ledger = crate::cli::open_writer(&path, args.write.busy_timeout, args.common.quiet)?;
    if args.message.is_none() {
        // Turns read from stdin, or a chat: many vector searches.
        ledger.keep_vector_packs(Default::default());
    }
    let opts = Options {
        embedder: if fresh {
            early
        } else {
            args.embed.open(&ledger)?
        },
        ..args.options()
    };
    if chat {
        let autonomy = args.autonomy.map(|every| chat::Autonomy {
            every,
            busy_ms: args.write.busy_timeout,
        });
        return chat::run(&mut ledger, cfg, &opts, args.streams(), autonomy);
    }
    let mut turns = Turns::new(&args, opts, &mut ledger, adapter.as_mut())?;
    // A closed stdout stops the printing, never the turns (see Out::for_writer).
    let mut out = Out::for_writer();
    match &args.message {
        Some(msg) => turns.one(msg, &mut out)?,
        None => each_line(&mut std::io::stdin().lock(), |line, at| {
            let msg = message_of(line, args.plain, at.clone())?;
            check_message(&msg, Some(at))?;
            turns.one(&msg, &mut out)
        })?,
    }
    Ok(Exit::Success)
}

impl Args {
    /// The adapter's configuration and the adapter, checked before anything is appended.
    fn adapter(&self) -> anyhow::Result<(Config, Box<dyn Adapter>)> {
        let cfg = self.config()?;
        // A setup error names its own cause (OPENAI_BASE_URL, --script FILE, …).
        let mut adapter = AdapterArgs::build(&cfg)?;
        // Mistakes known before anything is appended (a refused connection, an unknown model, a
        // rejected key) are exit 3 with a hint, and leave the ledger as it was (or uncreated).
        adapter.preflight().map_err(Error::from)?;
        Ok((cfg, adapter))
    }

    /// Whether this is an interactive session: `--chat`, or no message with `stdin_terminal`.
    fn chats(&self, stdin_terminal: bool) -> bool {
        self.chat || (self.message.is_none() && stdin_terminal)
    }
}

/// Non-interactive turns: what each of them shares.
struct Turns<'a> {
    ledger: &'a mut Ledger,
    adapter: &'a mut dyn Adapter,
    /// Raised by SIGINT or SIGTERM during a turn.
    cancel: Cancel,
    opts: Options,
    /// Whether replies are streamed.
    stream: bool,
    /// Where a streamed reply is shown: stdout with `--text`, else stderr.
    screen: Screen,
    /// `--text`: only the reply is printed.
    text: bool,
    /// Whether a spinner is shown until the reply starts (not with `--quiet`).
    spinner: bool,
}

impl<'a> Turns<'a> {
    /// Prepares the turns of `args` on `ledger` through `adapter`, with SIGINT and SIGTERM
    /// cancelling a turn's model call: the turn records the interruption (a
    /// generation_failure) and the program exits 130 or 143.
    fn new(
        args: &Args,
        opts: Options,
        ledger: &'a mut Ledger,
        adapter: &'a mut dyn Adapter,
    ) -> anyhow::Result<Turns<'a>> {
        let cancel = Cancel::new();
        cancel.on_signals()?;
        Ok(Turns {
            ledger,
            adapter,
            opts: Options {
                cancel: Some(cancel.clone()),
                ..opts
            },
            cancel,
            stream: args.streams(),
            screen: if args.text {
                Screen::Stdout
            } else {
                Screen::Stderr
            },
            text: args.text,
            spinner: !args.common.quiet,
        })
    }

    /// Runs one turn on `msg` and prints it on `out`; a signal after the reply was written
    /// prints the turn and exits.
    fn one(&mut self, msg: &str, out: &mut Out) -> anyhow::Result<()> {
        let live = self
            .stream
            .then(|| Live::start(self.screen, false, self.spinner));
        let opts = Options {
            stream: live.as_ref().map(Live::sink),
            ..self.opts.clone()
        };
        let result = {
            let _armed = self.cancel.arm();
            turn::run(self.ledger, self.adapter, msg, &opts)
        };
        if let Some(live) = live {
            live.finish();
        }
        if let (Ok(o), Some(signal)) = (&result, self.cancel.signal()) {
            // The signal came after the reply: the turn is whole; stop here all the same.
            print(out, self.text, self.stream, o)?;
            eprintln!("pmm-turn: interrupted after the turn was written");
            std::process::exit(128 + signal);
        }
        self.emit(out, result)
    }

    /// Prints a turn's result: the turn, or the events a failed model call left (not with
    /// `--text`) before its error is returned.
    fn emit(&self, out: &mut Out, result: Result<turn::TurnDone, TurnError>) -> anyhow::Result<()> {
        match result {
            Ok(o) => Ok(print(out, self.text, self.stream, &o)?),
            Err(TurnError::Generation {
                error,
                events,
                failure,
            }) => {
                if !self.text {
                    for e in &events {
                        out.event(e)?;
                    }
                    out.flush()?;
                }
                Err(Error::from(TurnError::Generation {
                    error,
                    events,
                    failure,
                })
                .into())
            }
            Err(e) => Err(Error::from(e).into()),
        }
    }
}

/// Calls `each` with every non-blank line of `input` (line ending removed) and where it is
/// (`<stdin>:N`, N counting every line); a line too long or not UTF-8 is bad input.
fn each_line(
    input: &mut impl BufRead,
    mut each: impl FnMut(&str, String) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    let mut n = 0u64;
    loop {
        n += 1;
        let at = || Some(format!("<stdin>:{n}"));
        let read = crate::lines::read_line_default(input, &mut buf).map_err(|e| {
            let msg = match crate::lines::too_long(&e) {
                Some(t) => t.to_string(),
                None => format!("reading stdin: {e}"),
            };
            Error::bad_input(at(), msg)
        })?;
        if read == 0 {
            return Ok(());
        }
        let line =
            std::str::from_utf8(crate::lines::trim_eol(&buf)).map_err(|_| Error::NotUtf8 {
                at: format!("<stdin>:{n}"),
            })?;
        if line.trim().is_empty() {
            continue;
        }
        each(line, format!("<stdin>:{n}"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(argv: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("pmm-turn").chain(argv.iter().copied())).unwrap()
    }

    #[test]
    fn a_session_is_interactive_with_chat_or_no_message_on_a_terminal() {
        assert!(args(&["--chat"]).chats(false));
        assert!(args(&[]).chats(true));
        assert!(!args(&[]).chats(false));
        assert!(!args(&["hello"]).chats(true));
    }

    /// The lines [`each_line`] hands on, with where they are, or its error.
    fn lines_of(input: &[u8]) -> Result<Vec<(String, String)>, String> {
        let mut seen = Vec::new();
        each_line(&mut &input[..], |line, at| {
            seen.push((line.to_string(), at));
            Ok(())
        })
        .map(|()| seen)
        .map_err(|e| e.to_string())
    }

    #[test]
    fn stdin_lines_skip_blanks_and_keep_their_numbers() {
        let pair = |l: &str, at: &str| (l.to_string(), at.to_string());
        assert_eq!(
            lines_of(b"one\r\n\n  \ntwo").unwrap(),
            vec![pair("one", "<stdin>:1"), pair("two", "<stdin>:4")]
        );
        assert_eq!(lines_of(b"").unwrap(), vec![]);
        let e = lines_of(b"ok\n\xff\n").unwrap_err();
        assert!(e.contains("<stdin>:2") && e.contains("not UTF-8"), "{e}");
    }
}
