//! `pmm-append`: append events; import a reference export or another ledger.

use crate::cli::{ClockArgs, CommonArgs, Exit, LedgerArgs, Out, Program, WriteArgs};
use crate::event::{self, Kind, NewEvent};
use crate::interchange::{self, Input};
use crate::lines::Piped;
use crate::session::{self, Refusal};
use crate::store::log::Writer;
use crate::store::EventLog;
use crate::store::{Filter, Fresh, Ledger};
use crate::Error;
use anyhow::Context;
use chrono::{DateTime, Utc};
use std::io::{BufRead, Read};
use std::path::PathBuf;

mod forget;
mod receipt;

const AFTER_HELP: &str = "\
EXAMPLES:
  Append one event:
    pmm-append --kind user_message --content 'hello' --meta '{\"role\":\"user\"}'
  Append JSON Lines from a pipe, committing each line as it arrives:
    tail -f notes.jsonl | pmm-append --db agent.db
  All or nothing:
    pmm-append --batch < events.jsonl
  Import a dated conversation, keeping each line's time (all or nothing):
    printf '%s\\n' '{\"ts\":\"2023-05-08T13:56:00Z\",\"kind\":\"user_message\",\"content\":\"hi\"}' \\
      | pmm-append --db conv.db --keep-ts
  Move a mind into PostgreSQL, shared by several hosts (same head hash and Merkle root):
    pmm-export --db agent.db --format jsonl | pmm-append --db postgres://pmm@db.example/mind --import -
  Copy the user messages of one ledger into another (ids and hashes are new there):
    pmm-replay --db a.db --kind user_message | pmm-append --db b.db
  Keep a reference ledger, forks and all, and check it came through byte for byte:
    pmm-append --db new.db --import ledger.json.gz --accept-forks
    gunzip -c ledger.json.gz > ledger.json      # each side in a file: cmp cannot pass
    pmm-export --db new.db -o kept.json && cmp kept.json ledger.json   # when both failed
  Correct a fact (the old event stays as history; recall shows the new one first):
    pmm-append --kind user_message --content 'I live in Berlin now' --supersedes 12
    pmm-recall --current 'where do I live'
  Erase a message and the summaries that quote it (the chain and proofs still verify):
    pmm-append --erase 42 --reason 'user asked to forget' --source owner --with-quotes
    pmm-verify | jq -c 'select(.type==\"erased\")'

INPUT:
  One JSON object per line: {\"kind\": K, \"content\": STRING, \"meta\": OBJECT}; meta is optional.
  Other fields (id, ts, hash, ... as pmm-replay prints them) are ignored, except ts with
  --keep-ts: an RFC 3339 time (2023-05-08T13:56:00Z, offsets and fractions allowed), stored in
  UTC with microseconds; it must not go back before the previous line or the ledger's head.
  A line longer than --max-line (default 256M) is bad input, exit 2.

OUTPUT:
  Each appended event as a JSON line, flushed as it is committed. Lines that arrive while a
  commit runs are committed next, together (on PostgreSQL, plain lines in one round trip);
  a line that is refused or bad comes after the lines before it are committed and printed.
  A closed stdout (pmm-append | head -1) stops the printing, not the appending: like tee -p,
  every input line is still appended, and the exit status is what it would have been.

EXIT STATUS:
  0  every event was appended
  1  the write policy refused a sensitive write or an erasure (a violation event was
     appended)
  2  bad input (named with its line), unknown kind, unreadable import, locked or read-only
     ledger; the offending event is not written (lines before it stay, unless --batch or
     --keep-ts); with --keep-ts a missing, bad or backwards ts (named with its line);
     with --erase an id that is no event, an erasure, or an event already erased

ENVIRONMENT:
  PMM_DB    the ledger when --db is not given (default .data/pmmdb/pmm.db)
  PMM_NOW   pin the clock (RFC 3339) for reproducible timestamps
  A .env file in the current directory is read for variables that are not set.";

/// Append events to a pmm ledger.
///
/// Reads JSON Lines on stdin (one event per line) and appends each to the hash chain in its own
/// transaction, printing every appended event as JSON Lines; or appends the one event given by
/// --kind/--content/--meta; or imports a whole ledger verbatim with --import; or erases an
/// event's content with --erase (then prints the erasure events and one
/// {"type":"erasure","erased","quoted_by","wal_truncated"} record).
///
/// Every append is one BEGIN IMMEDIATE transaction that reads the head and inserts, so any
/// number of processes may append to one ledger at once and the chain stays unbroken.
/// Sensitive kinds (config, checkpoint_manifest, embedding_add, retrieval_selection) are
/// checked against the ledger's write policy; a refusal appends a violation event.
#[derive(Debug, clap::Parser)]
#[command(name = "pmm-append", version, after_long_help = AFTER_HELP)]
#[command(group(clap::ArgGroup::new("erasing").multiple(true)
    .args(["erase", "erase_query", "erase_concept", "erase_source", "erase_range"])))]
pub struct Args {
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    clock: ClockArgs,
    #[command(flatten)]
    write: WriteArgs,
    #[command(flatten)]
    common: CommonArgs,

    /// Append one event of this kind (stdin is not read)
    #[arg(long, value_name = "KIND", conflicts_with_all = ["batch", "import"])]
    kind: Option<String>,
    /// The content of the --kind event
    #[arg(long, value_name = "TEXT", requires = "kind", default_value = "")]
    content: String,
    /// The meta object of the --kind event, as JSON
    #[arg(long, value_name = "JSON", requires = "kind")]
    meta: Option<String>,
    /// The --kind event corrects event ID (repeatable): it is written with meta.supersedes
    /// listing them (earlier events; checked in the write). The old events stay as history;
    /// recall puts the correction first and labels them superseded, pmm-recall --current
    /// leaves them out
    #[arg(long, value_name = "ID", requires = "kind")]
    supersedes: Vec<i64>,
    /// Commit all of stdin in one transaction: every line or none
    #[arg(long, conflicts_with = "import")]
    batch: bool,
    /// Use each stdin line's "ts" (RFC 3339) as the event's time instead of the clock; times
    /// must not go backwards (from line to line, nor before the ledger's head). Reads and
    /// checks all of stdin first, then commits it in one transaction like --batch
    #[arg(long, conflicts_with_all = ["kind", "import"])]
    keep_ts: bool,
    /// Import a reference JSON export, JSONL events, a .gz of either, or a SQLite ledger,
    /// verbatim (ids, ts, hashes), into an empty ledger or as an exact continuation of its head.
    /// When no ledger exists at --db yet, the new one is built beside it in a hidden file,
    /// .NAME.import-PID, and moved into place only when complete: readers never see part of an
    /// import, a killed import leaves no ledger (only that file, which the next import into
    /// the same path removes), and a ledger that appears at --db meanwhile is never replaced
    /// (the import is refused, exit 2)
    #[arg(long, value_name = "FILE")]
    import: Option<PathBuf>,
    /// With --import: accept a source whose chain has broken links (kept verbatim, so the
    /// result verifies exactly like the source)
    #[arg(long, requires = "import")]
    accept_forks: bool,
    /// Leave the full-text index behind (a bulk import that should not wait for it): the
    /// next writer brings it up to date, with a progress bar, in its own transaction
    #[arg(long)]
    no_index: bool,
    /// List the allowed kinds and exit
    #[arg(long)]
    list_kinds: bool,
    /// Erase event ID: remove its content and meta from the ledger and from every derived
    /// table (full-text index, vectors, projection checkpoints), zeroed in the file, and append
    /// an erasure event naming its id, hash and --reason, in one transaction. The chain still
    /// links through it and its Merkle proofs still verify; pmm-verify reports it as erased.
    /// Only an actor trusted with the write policy may erase (see --source)
    #[arg(long, value_name = "ID", conflicts_with_all = ["kind", "batch", "keep_ts", "import", "erase_query", "erase_concept", "erase_source", "erase_range"], requires = "reason")]
    erase: Option<i64>,
    /// Forget by subject: erase the events recall finds for TEXT (as pmm-recall TEXT does,
    /// the whole ledger, no budget) whose fused score is at least --min-score
    #[arg(long, value_name = "TEXT", requires = "min_score", conflicts_with_all = ["kind", "batch", "keep_ts", "import"])]
    erase_query: Option<String>,
    /// With --erase-query: the lowest fused score taken (pmm-recall prints each event's
    /// score; one source's best match scores 1/61 = 0.0164)
    #[arg(long, value_name = "SCORE", requires = "erase_query")]
    min_score: Option<f64>,
    /// Forget by subject: erase the events bound to the concept TOKEN (its aliases too)
    #[arg(long, value_name = "TOKEN", conflicts_with_all = ["kind", "batch", "keep_ts", "import"])]
    erase_concept: Option<String>,
    /// Forget by subject: erase the events whose meta.source is ACTOR (e.g. mcp:laptop)
    #[arg(long, value_name = "ACTOR", conflicts_with_all = ["kind", "batch", "keep_ts", "import"])]
    erase_source: Option<String>,
    /// Forget by subject: erase the events whose time is in FROM..TO (RFC 3339 times or
    /// YYYY-MM-DD dates, both ends included; a date as TO is its whole day)
    #[arg(long, value_name = "FROM..TO", conflicts_with_all = ["kind", "batch", "keep_ts", "import"])]
    erase_range: Option<String>,
    /// With an --erase option: print every event that would be erased (and the quotes
    /// --with-quotes would take) and write nothing
    #[arg(long, requires = "erasing")]
    dry_run: bool,
    /// Why the erasure is made (kept in each erasure event)
    #[arg(long, value_name = "TEXT", requires = "erasing")]
    reason: Option<String>,
    /// With an --erase option: erase too the later events that quote the erased text
    /// (reflections, summaries, lifetime-memory chunks, meta summaries, claims, commitments,
    /// identity adoptions whose content or meta holds its first 60 characters) and its
    /// embedding_add events (whose sha256 of the text confirms a guess of it); without it
    /// they are only listed
    #[arg(long, requires = "erasing")]
    with_quotes: bool,
    /// With an --erase option: the actor erasing (the erasure event's meta.source). The write
    /// policy lets only an actor that may write config events erase: under the reference's
    /// default policy any actor but cli
    #[arg(long, value_name = "NAME", default_value = "cli", requires = "erasing")]
    source: String,
    /// With an --erase option: write a receipt to FILE after the erasure (JSON: the erased
    /// ids, their hashes, an inclusion proof of each, and a checkpoint signed with --key
    /// taken after the erasure, which pmm-verify --checkpoint and --check-proof accept)
    #[arg(long, value_name = "FILE", requires_all = ["erasing", "key"], conflicts_with = "dry_run")]
    receipt: Option<PathBuf>,
    /// The ledger's private key file (pmm-export --keygen) that signs the --receipt's
    /// checkpoint
    #[arg(long, value_name = "KEYFILE", requires = "receipt")]
    key: Option<PathBuf>,
}

impl Program for Args {
    fn common(&self) -> &CommonArgs {
        &self.common
    }
}

/// Runs `pmm-append`.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    // A closed stdout stops the printing, never the appending (see Out::for_writer).
    let mut out = Out::for_writer();
    if args.list_kinds {
        for k in event::all_kinds() {
            out.raw(format!("{k}\n").as_bytes())?;
        }
        out.flush()?;
        return Ok(Exit::Success);
    }
    if let Some(source) = &args.import {
        return import(&args, source, &mut out);
    }
    append(&args, &mut out)
}

/// A refused write still appended its `violation` event: print it like any appended event
/// (then the refusal is reported as the error, exit 1).
pub(crate) fn print_violation(
    ledger: &Ledger,
    e: &anyhow::Error,
    out: &mut Out,
) -> anyhow::Result<()> {
    if let Some(Error::PolicyViolation { violation_id, .. }) =
        e.chain().find_map(|c| c.downcast_ref::<Error>())
    {
        if let Some(v) = ledger.get(*violation_id)? {
            out.event(&v)?;
            out.flush()?;
        }
    }
    Ok(())
}

fn append(args: &Args, out: &mut Out) -> anyhow::Result<Exit> {
    if forget::wanted(args) {
        return forget::run(args, out);
    }
    if let Some(id) = args.erase {
        return erase(args, id, out);
    }
    // Parse and validate before opening anything for writing.
    let single = match &args.kind {
        Some(kind) => {
            let mut meta = match &args.meta {
                Some(m) => crate::canon::parse_meta(m)
                    .map_err(|e| Error::bad_input(Some("--meta".into()), e.0))?,
                None => Default::default(),
            };
            with_supersedes(&mut meta, &args.supersedes)?;
            Some(
                NewEvent::new(Kind::from(kind.as_str()), args.content.clone(), meta)
                    .map_err(|e| Error::bad_input(Some("--kind".into()), e))?,
            )
        }
        None => None,
    };
    let clock = args.clock.clock();
    // What stdin says is checked before the ledger is opened, which may make it: a bad first
    // line (with --keep-ts, any bad line) leaves no new ledger behind. Once opened, a ledger is
    // never removed again: another writer may have opened it too (issue 44, N0).
    // One buffer over stdin, so that `Piped::line_waiting` sees every byte read ahead.
    let mut stdin = Piped::new(Vec::new(), std::io::stdin().lock());
    let pending = match single {
        Some(ev) => Pending::One(ev),
        None if args.keep_ts => Pending::Timed(read_timed(&mut stdin)?),
        None => Pending::First(read_first(&mut stdin)?),
    };
    let mut ledger = if args.no_index {
        let mut l = Ledger::open_writer(&args.ledger.path(), args.write.busy_timeout)?;
        l.defer(crate::store::Derived::Text);
        l
    } else {
        crate::cli::open_writer(
            &args.ledger.path(),
            args.write.busy_timeout,
            args.common.quiet,
        )?
    };
    let result = match pending {
        Pending::One(ev) => session::append(&mut ledger, &ev, &clock)
            .map_err(anyhow::Error::new)
            .and_then(|event| {
                out.event(&event)?;
                out.flush()?;
                Ok(Exit::Success)
            }),
        Pending::Timed(events) => keep_ts(&mut ledger, events, &clock, out),
        Pending::First(first) => {
            // Line 1 is read again, from memory, then the rest of stdin.
            stdin.unread(first);
            if args.batch {
                batch(&mut ledger, &mut stdin, &clock, out)
            } else {
                streaming(&mut ledger, &mut stdin, &clock, out)
            }
        }
    };
    if let Err(e) = &result {
        print_violation(&ledger, e, out)?;
    }
    result
}

/// What to append, as far as it is read before the ledger is opened.
enum Pending {
    /// `--kind`: one event.
    One(NewEvent),
    /// `--keep-ts`: every line, checked, with its time.
    Timed(Vec<(u64, NewEvent, DateTime<Utc>)>),
    /// Otherwise: the first line, as read (empty at the end of input), parsed once to check it.
    First(Vec<u8>),
}

/// Reads and checks stdin's first line: its bytes, to be read again.
fn read_first(input: &mut dyn BufRead) -> anyhow::Result<Vec<u8>> {
    let mut buf = String::new();
    if read_line(input, &mut buf, 1)? {
        parse(&buf, 1)?;
    }
    Ok(buf.into_bytes())
}

/// `--supersedes`: the ids into `meta.supersedes` (a meta that names its own is ambiguous).
fn with_supersedes(
    meta: &mut serde_json::Map<String, serde_json::Value>,
    ids: &[i64],
) -> Result<(), Error> {
    if ids.is_empty() {
        return Ok(());
    }
    let key = crate::projection::supersession::KEY;
    if meta.contains_key(key) {
        return Err(Error::bad_input(
            Some("--supersedes".into()),
            format!("--meta already has \"{key}\": give the ids one way"),
        ));
    }
    meta.insert(key.into(), serde_json::json!(ids));
    Ok(())
}

fn read_line(input: &mut dyn BufRead, buf: &mut String, n: u64) -> anyhow::Result<bool> {
    buf.clear();
    let mut bytes = std::mem::take(buf).into_bytes();
    let at = || Some(format!("<stdin>:{n}"));
    let read = crate::lines::read_line_default(input, &mut bytes).map_err(|e| {
        let msg = match crate::lines::too_long(&e) {
            Some(t) => t.to_string(),
            None => e.to_string(),
        };
        Error::bad_input(at(), msg)
    })?;
    *buf = String::from_utf8(bytes).map_err(|_| Error::NotUtf8 {
        at: format!("<stdin>:{n}"),
    })?;
    Ok(read > 0)
}

fn parse(buf: &str, n: u64) -> Result<NewEvent, Error> {
    let line = buf.strip_suffix('\n').unwrap_or(buf);
    let line = line.strip_suffix('\r').unwrap_or(line);
    NewEvent::from_json_line(line)
        .map_err(|msg| Error::bad_input(Some(format!("<stdin>:{n}")), msg))
}

/// The most lines [`streaming`] commits together.
const GROUP_MAX: usize = 256;

/// Appends each line as it arrives, and prints it once committed. The lines that arrived
/// while a commit ran are committed together, when no check of theirs reads the ledger
/// (`session::checks_read_the_ledger`): on PostgreSQL one round trip for them all
/// (`Writer::append_independents`); a line that is refused, or bad, comes after the lines
/// before it are committed and printed.
fn streaming<W: Writer, R: Read + std::os::fd::AsFd>(
    ledger: &mut W,
    input: &mut Piped<R>,
    clock: &event::Clock,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let mut buf = String::new();
    let mut n = 0;
    let mut next: Option<NewEvent> = None;
    loop {
        let ev = match next.take() {
            Some(ev) => ev,
            None => {
                n += 1;
                if !read_line(input, &mut buf, n)? {
                    return Ok(Exit::Success);
                }
                parse(&buf, n)?
            }
        };
        let first = n;
        if session::checks_read_the_ledger(&ev) {
            let event =
                session::append(ledger, &ev, clock).with_context(|| format!("<stdin>:{n}"))?;
            print_committed(out, event)?;
            continue;
        }
        let mut group = vec![ev];
        let mut after = Ok(());
        while group.len() < GROUP_MAX && input.line_waiting() {
            n += 1;
            match read_line(input, &mut buf, n).and_then(|_| Ok(parse(&buf, n)?)) {
                Ok(ev) if session::checks_read_the_ledger(&ev) => {
                    next = Some(ev);
                    break;
                }
                Ok(ev) => group.push(ev),
                Err(e) => {
                    after = Err(e);
                    break;
                }
            }
        }
        // The line of the event being appended or printed (the group's lines follow each
        // other): a failure names it.
        let mut line = first;
        let mut printing = Ok(());
        let appended = ledger.append_independents(&group, clock, &mut |event| {
            printing = print_committed(out, event);
            match &printing {
                Ok(()) => {
                    line += 1;
                    Ok(())
                }
                Err(_) => Err(Error::bad_input(None, "printing stopped")),
            }
        });
        printing.with_context(|| format!("<stdin>:{line}: committed, not printed"))?;
        appended.with_context(|| format!("<stdin>:{line}"))?;
        after?;
    }
}

/// Prints an appended event, flushed: a pipeline downstream may be waiting for it.
fn print_committed(out: &mut Out, event: event::Event) -> anyhow::Result<()> {
    out.event(&event)?;
    out.flush()?;
    Ok(())
}

/// Appends line `n`'s event inside a batch: `Some` is the policy's refusal (the caller rolls
/// the batch back and records it); other errors name the line.
fn batch_append(
    tx: &mut crate::store::Batch<'_>,
    ev: &event::NewEvent,
    clock: &event::Clock,
    n: u64,
) -> anyhow::Result<Option<crate::store::Violation>> {
    match session::append_in(tx, ev, clock) {
        Ok(_) => Ok(None),
        Err(Refusal::Policy(v)) => Ok(Some(v)),
        Err(Refusal::Error(e)) => Err(anyhow::Error::new(e).context(format!("<stdin>:{n}"))),
    }
}

/// After a batch was rolled back for line `n`'s refused event: the `violation`, recorded in a
/// transaction of its own, as the error to report (exit 1).
fn rolled_back<W: Writer>(
    ledger: &mut W,
    v: &crate::store::Violation,
    n: u64,
    clock: &event::Clock,
) -> anyhow::Error {
    match session::record_violation(ledger, v, clock) {
        Ok(err) => anyhow::Error::new(err).context(format!("<stdin>:{n}: batch rolled back")),
        Err(e) => e.into(),
    }
}

fn batch(
    ledger: &mut Ledger,
    input: &mut dyn BufRead,
    clock: &event::Clock,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let mut buf = String::new();
    let mut n = 0;
    let mut tx = ledger.begin()?;
    let first = tx.head().map_or(1, |h| h.id.saturating_add(1));
    let refused = loop {
        n += 1;
        if !read_line(input, &mut buf, n)? {
            break None;
        }
        // An error drops `tx`, which rolls the whole batch back.
        let ev = parse(&buf, n)?;
        if let Some(v) = batch_append(&mut tx, &ev, clock, n)? {
            break Some((v, n));
        }
    };
    let last = tx.head().map_or(0, |h| h.id);
    if let Some((v, n)) = refused {
        drop(tx);
        return Err(rolled_back(ledger, &v, n, clock));
    }
    tx.commit()?;
    print_range(ledger, first, last, out)
}

/// Prints the events `first..=last`, after the commit, from the ledger, so that only durable
/// events are reported and memory does not grow with the batch.
fn print_range(ledger: &Ledger, first: i64, last: i64, out: &mut Out) -> anyhow::Result<Exit> {
    let filter = Filter {
        since: Some(first),
        until: Some(last),
        kinds: vec![],
    };
    let mut io_err = None;
    ledger.scan(&filter, &mut |e| match out.event(&e) {
        Ok(()) => Ok(true),
        Err(err) => {
            io_err = Some(err);
            Ok(false)
        }
    })?;
    if let Some(e) = io_err {
        return Err(e.into());
    }
    out.flush()?;
    Ok(Exit::Success)
}

/// The `ts` of a `--keep-ts` line, in UTC.
fn line_ts(buf: &str, n: u64) -> Result<DateTime<Utc>, Error> {
    let bad = |msg: String| Error::bad_input(Some(format!("<stdin>:{n}")), msg);
    // The line already parsed as an event, so it is a JSON object.
    let v: serde_json::Value =
        serde_json::from_str(buf.trim_end()).map_err(|e| bad(e.to_string()))?;
    match v.get("ts") {
        None | Some(serde_json::Value::Null) => Err(bad(
            "missing \"ts\" (--keep-ts needs an RFC 3339 time on every line)".into(),
        )),
        Some(serde_json::Value::String(t)) => DateTime::parse_from_rfc3339(t.trim())
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| bad(format!("\"ts\" '{t}' is not an RFC 3339 time ({e})"))),
        Some(other) => Err(bad(format!(
            "\"ts\" must be an RFC 3339 time string, not {}",
            crate::canon::type_name(other)
        ))),
    }
}

/// `--keep-ts`'s input: every line of stdin, read and checked (events and their times, which
/// must not go backwards) before anything is written.
fn read_timed(input: &mut dyn BufRead) -> anyhow::Result<Vec<(u64, NewEvent, DateTime<Utc>)>> {
    let mut buf = String::new();
    let mut n = 0;
    let mut events: Vec<(u64, NewEvent, DateTime<Utc>)> = Vec::new();
    loop {
        n += 1;
        if !read_line(input, &mut buf, n)? {
            break;
        }
        let ev = parse(&buf, n)?;
        let ts = line_ts(&buf, n)?;
        if let Some((_, _, prev)) = events.last() {
            if ts < *prev {
                return Err(Error::bad_input(
                    Some(format!("<stdin>:{n}")),
                    format!(
                        "\"ts\" {} goes back before the previous line's {} (--keep-ts times must not go backwards)",
                        event::format_ts(ts),
                        event::format_ts(*prev)
                    ),
                )
                .into());
            }
        }
        events.push((n, ev, ts));
    }
    Ok(events)
}

/// `--keep-ts`: appends everything read in one transaction, each event at its own time.
fn keep_ts(
    ledger: &mut Ledger,
    events: Vec<(u64, NewEvent, DateTime<Utc>)>,
    clock: &event::Clock,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let mut tx = ledger.begin()?;
    let first = tx.head().map_or(1, |h| h.id.saturating_add(1));
    if let (Some(head), Some((n, _, ts))) = (tx.head().map(|h| h.id), events.first()) {
        // The head's stored time; one that does not parse (a foreign import) cannot be ordered.
        let head_ts = EventLog::get(&tx, head)?
            .and_then(|e| DateTime::parse_from_rfc3339(e.ts.trim()).ok())
            .map(|t| t.with_timezone(&Utc));
        if let Some(h) = head_ts.filter(|h| ts < h) {
            return Err(Error::bad_input(
                Some(format!("<stdin>:{n}")),
                format!(
                    "\"ts\" {} goes back before the ledger's head (event {head}, {}) (--keep-ts times must not go backwards)",
                    event::format_ts(*ts),
                    event::format_ts(h)
                ),
            )
            .into());
        }
    }
    let mut refused = None;
    for (n, ev, ts) in &events {
        // An error drops `tx`, which rolls the whole batch back.
        if let Some(v) = batch_append(&mut tx, ev, &event::Clock::Pinned(*ts), *n)? {
            refused = Some((v, *n));
            break;
        }
    }
    let last = tx.head().map_or(0, |h| h.id);
    if let Some((v, n)) = refused {
        drop(tx);
        return Err(rolled_back(ledger, &v, n, clock));
    }
    tx.commit()?;
    drop(events);
    print_range(ledger, first, last, out)
}

/// `--import`: into a path that holds no ledger yet, a new ledger built beside it and put
/// in place whole ([`Fresh`]); into an existing ledger, one write transaction in its WAL.
fn import(args: &Args, source: &std::path::Path, out: &mut Out) -> anyhow::Result<Exit> {
    let input = Input::new(source);
    let path = args.ledger.path();
    let summary = match Fresh::start(&path, args.write.busy_timeout)? {
        Some(mut fresh) => {
            let summary = import_into(args, fresh.ledger(), &input)?;
            fresh.publish()?;
            summary
        }
        None => {
            // A ledger is never removed once opened: another writer may have opened it too.
            let mut ledger = Ledger::open_writer(&path, args.write.busy_timeout)?;
            import_into(args, &mut ledger, &input)?
        }
    };
    out.record(&summary)?;
    out.flush()?;
    Ok(Exit::Success)
}

/// The import itself, with its progress bar.
fn import_into(
    args: &Args,
    ledger: &mut Ledger,
    input: &Input,
) -> crate::Result<interchange::ImportSummary> {
    if args.no_index {
        ledger.defer(crate::store::Derived::Text);
    }
    let size = input
        .path
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    let bar = crate::cli::progress(size, args.common.quiet, "importing");
    let tick = |n: u64| bar.set_position(n);
    let summary = interchange::import(ledger, input, args.accept_forks, &tick)?;
    bar.finish_and_clear();
    Ok(summary)
}

/// What `--erase` did besides its erasure events: every event erased, the later events that
/// quote the erased text and were left (without `--with-quotes`), and whether the WAL was
/// truncated.
#[derive(serde::Serialize)]
struct EraseRecord {
    #[serde(rename = "type")]
    record: &'static str,
    erased: Vec<i64>,
    quoted_by: Vec<i64>,
    wal_truncated: bool,
}

fn erase(args: &Args, id: i64, out: &mut Out) -> anyhow::Result<Exit> {
    let reason = args.reason.as_deref().unwrap_or_default();
    if crate::pystr::strip(reason).is_empty() {
        return Err(Error::bad_input(Some("--reason".into()), "the reason is empty").into());
    }
    let path = args.ledger.path();
    if !crate::store::exists(&path) {
        return Err(Error::MissingLedger(path).into());
    }
    let mut ledger = Ledger::open_writer(&path, args.write.busy_timeout)?;
    let quotes = match ledger.get(id)? {
        Some(ev) => ledger.quoting(id, &ev.content)?,
        None => Vec::new(),
    };
    let clock = args.clock.clock();
    let erased = match session::erase(
        &mut ledger,
        &[id],
        args.with_quotes,
        reason,
        &args.source,
        &clock,
    ) {
        Ok(e) => e,
        Err(e) => {
            let e = anyhow::Error::new(e);
            print_violation(&ledger, &e, out)?;
            return Err(e);
        }
    };
    for ev in &erased.events {
        out.event(ev)?;
    }
    out.record(&EraseRecord {
        record: "erasure",
        erased: erased.erased.clone(),
        quoted_by: if args.with_quotes { vec![] } else { quotes },
        wal_truncated: erased.wal_truncated,
    })?;
    out.flush()?;
    Ok(Exit::Success)
}
