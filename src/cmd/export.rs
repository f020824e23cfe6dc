//! `pmm-export`: export a ledger.

use crate::chain::note::{SignerKey, VerifierKey};
use crate::cli::{ClockArgs, CommonArgs, Exit, LedgerArgs, Program};
use crate::interchange::report::{EmbeddedCheckpoint, ReportOptions};
use crate::interchange::{self, ExportContext, ExportFormat};
use crate::outfile::OutputFile;
use crate::store::EventLog;
use crate::store::{Filter, Ledger};
use crate::Error;
use flate2::write::GzEncoder;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

const AFTER_HELP: &str = "\
EXAMPLES:
  The reference export, compressed, then verified (in CI):
    pmm-export -o ledger.json.gz && pmm-verify ledger.json.gz
  Stream events to jq:
    pmm-export --format jsonl | jq -c 'select(.kind==\"reflection\") | .content'
  A transcript of the conversation:
    pmm-export --format md -o chat.md
  A spreadsheet of the commitments:
    pmm-export --format csv --kind commitment_open --kind commitment_close -o commitments.csv
  The telemetry report of the reference, for events 100 to 200:
    pmm-export --format telemetry --since 100 --until 200 -o telemetry.md
  One offline page that shows the mind and verifies itself in the browser, with a signed
  checkpoint embedded; the same file checked on the command line:
    pmm-export --checkpoint --key log.key > cp.txt
    pmm-export -o mind.html --embed-checkpoint cp.txt --key \"$VKEY\" --title \"Agent, May\"
    pmm-verify mind.html
  A signing key, then a signed checkpoint of the ledger's Merkle tree (docs/verification.md):
    VKEY=$(pmm-export --keygen agent.example/ledger --key log.key)   # prints the verifier key
    pmm-export --checkpoint --key log.key > cp.txt
    pmm-verify --checkpoint cp.txt --key \"$VKEY\"          # later: the ledger only grew

FORMATS:
  json       the reference export: a JSON array, indent 2, raw UTF-8, meta as a string
             (byte-identical to the reference for an imported ledger)
  jsonl      one event per line, meta as an object (the default on stdout)
  csv        RFC 4180, columns id,ts,kind,content,meta,prev_hash,hash
  md         a readable transcript of the conversation, marker lines hidden; turns are
             exchanges, replies name their provider and model, failed turns are shown
  telemetry  the reference telemetry report: event table, kind counts, continuity breaks,
             verification manifest
  html       one self-contained page, nothing fetched when opened (docs/report.md): timeline,
             why each reply said what it said, commitments, the self over time, concepts,
             cost, search, and an integrity banner whose verdict the page computes itself
             (every hash and link, the Merkle root, an embedded checkpoint's signature).
             The events are in <script type=\"application/json\" id=\"pmm-events\">, the
             verdict on the element id=\"pmm-verdict\". Past 200,000 events the page warns
             and names a window to export with --since/--until
  Without --format the format follows the -o name (.json, .jsonl, .csv, .md, .html; .gz is
  stripped first), else jsonl. A -o file is written beside its target and renamed into
  place when complete: whole or not at all, an existing file keeps its mode, and a failed
  export leaves the old file as it was. -o may not be the ledger or its -wal, -shm or
  -journal file (by identity: symlinks and hard links too); that is refused with exit 2.

CHECKPOINTS:
  --keygen NAME --key FILE writes a new Ed25519 private key to FILE (mode 0600, never
  printed, never in the ledger; an existing FILE is refused) in Go's note format
  (PRIVATE+KEY+NAME+HASH+BASE64), and prints the verifier key NAME+HASH+BASE64 to give to
  whoever checks checkpoints. --checkpoint --key FILE prints a C2SP tlog-checkpoint (origin
  NAME, tree size, base64 root) signed as a C2SP signed note. Neither is a ledger export:
  nothing of them is written to the ledger.

EXIT STATUS:
  0  exported (a closed pipe also ends quietly with 0)
  2  missing ledger, bad arguments, -o is the ledger or one of its files, or the output
     could not be written

ENVIRONMENT:
  PMM_DB    the ledger when --db is not given (default .data/pmmdb/pmm.db)
  PMM_NOW   pin the clock: the export time printed by md and telemetry";

/// Export a ledger as the reference JSON, JSON Lines, CSV, a Markdown transcript or the
/// reference telemetry report.
///
/// Streams the events in id order (optionally only a range or some kinds) to stdout or to a
/// file; a file whose name ends in .gz is gzip-compressed.
#[derive(Debug, clap::Parser)]
#[command(name = "pmm-export", version, after_long_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    clock: ClockArgs,
    #[command(flatten)]
    common: CommonArgs,

    /// Output format [default: from the -o name, else jsonl]
    #[arg(long, short = 'f', value_enum)]
    format: Option<FormatArg>,
    /// Write to FILE instead of stdout (.gz compresses; written atomically)
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Only events with id ≥ ID
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(i64).range(0..), allow_negative_numbers = true)]
    since: Option<i64>,
    /// Only events with id ≤ ID
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(i64).range(0..), allow_negative_numbers = true)]
    until: Option<i64>,
    /// Only events of this kind (repeatable)
    #[arg(long, value_name = "KIND")]
    kind: Vec<String>,
    /// Generate a signing key named NAME into --key FILE and print its verifier key
    #[arg(long, value_name = "NAME", requires = "key", conflicts_with_all = ["checkpoint", "format", "output"], help_heading = "Checkpoints")]
    keygen: Option<String>,
    /// Print a signed checkpoint of the ledger's Merkle tree (signed with --key FILE)
    #[arg(long, requires = "key", conflicts_with_all = ["format", "output"], help_heading = "Checkpoints")]
    checkpoint: bool,
    /// The private key file of --keygen and --checkpoint; with --embed-checkpoint, the
    /// verifier key (or a file holding it, or the private key file)
    #[arg(long, value_name = "FILE", help_heading = "Checkpoints")]
    key: Option<PathBuf>,
    /// The HTML report's title [default: pmm: the mind]
    #[arg(long, value_name = "TEXT", help_heading = "HTML report")]
    title: Option<String>,
    /// Embed a signed checkpoint FILE (from --checkpoint) in the HTML report, checked in the
    /// browser with the verifier key given by --key
    #[arg(
        long,
        value_name = "FILE",
        requires = "key",
        help_heading = "HTML report"
    )]
    embed_checkpoint: Option<PathBuf>,
}

impl Program for Args {
    fn common(&self) -> &CommonArgs {
        &self.common
    }
}

fn is_gz(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

/// The format a file name asks for (`ledger.json.gz` → json).
pub fn format_from_name(path: &Path) -> Option<ExportFormat> {
    let stem = if is_gz(path) {
        Path::new(path.file_stem()?)
    } else {
        path
    };
    match stem.extension()?.to_str()? {
        "json" => Some(ExportFormat::Json),
        "jsonl" | "ndjson" => Some(ExportFormat::Jsonl),
        "csv" => Some(ExportFormat::Csv),
        "md" | "markdown" => Some(ExportFormat::Md),
        "html" | "htm" => Some(ExportFormat::Html),
        _ => None,
    }
}

/// `--format`'s names (clap stays in `cmd`; the library has its own [`ExportFormat`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FormatArg {
    /// The reference export: JSON array, indent 2, raw UTF-8, `meta` as a string.
    Json,
    /// One event per line, `meta` as an object.
    Jsonl,
    /// RFC 4180 CSV with the seven columns.
    Csv,
    /// A readable Markdown transcript of the conversation (markers hidden).
    Md,
    /// The reference telemetry report (FORMATS.md §13.5).
    Telemetry,
    /// One offline page that shows the mind and verifies itself (docs/report.md).
    Html,
}

impl From<FormatArg> for ExportFormat {
    fn from(f: FormatArg) -> ExportFormat {
        match f {
            FormatArg::Json => ExportFormat::Json,
            FormatArg::Jsonl => ExportFormat::Jsonl,
            FormatArg::Csv => ExportFormat::Csv,
            FormatArg::Md => ExportFormat::Md,
            FormatArg::Telemetry => ExportFormat::Telemetry,
            FormatArg::Html => ExportFormat::Html,
        }
    }
}

/// Runs `pmm-export`.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    if let (Some(name), Some(key)) = (&args.keygen, &args.key) {
        return keygen(name, key, &args.ledger.path());
    }
    if let (true, Some(key)) = (args.checkpoint, &args.key) {
        return checkpoint(key, &args.ledger.path());
    }
    if args.key.is_some() && args.embed_checkpoint.is_none() {
        return Err(Error::bad_input(
            Some("--key".into()),
            "--key goes with --keygen, --checkpoint or --embed-checkpoint",
        )
        .into());
    }
    let format = checked_format(&args)?;
    let report = report_options(&args, format)?;
    let ledger = Ledger::open_reader(&args.ledger.path())?;
    let ctx = ExportContext {
        exported_at: args.clock.clock().now(),
        output_name: args
            .output
            .as_ref()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned()),
    };
    let filter = Filter {
        since: args.since,
        until: args.until,
        kinds: args
            .kind
            .iter()
            .map(|k| crate::event::Kind::from(k.as_str()))
            .collect(),
    };
    let total = ledger.max_id()?.max(0) as u64;
    if format == ExportFormat::Html {
        warn_if_big(&args, ledger.max_id()?);
    }
    let bar = crate::cli::progress(
        total,
        args.common.quiet || args.output.is_none(),
        "exporting",
    );
    let out = Output {
        format,
        ctx: &ctx,
        report: &report,
    };
    write_output(&args, &ledger, &filter, &out, &bar)?;
    bar.finish_and_clear();
    Ok(Exit::Success)
}

/// The export's format (`--format`, else the output's name, else JSON Lines), once the rest of
/// the selection is checked: `--since` not after `--until`, each `--kind` a kind, and the
/// output not the ledger (or one of its files).
fn checked_format(args: &Args) -> anyhow::Result<ExportFormat> {
    let format = args
        .format
        .map(ExportFormat::from)
        .or_else(|| args.output.as_deref().and_then(format_from_name))
        .unwrap_or(ExportFormat::Jsonl);
    if let (Some(s), Some(u)) = (args.since, args.until) {
        if s > u {
            return Err(Error::bad_input(
                Some("--since/--until".into()),
                format!("--since {s} is after --until {u}"),
            )
            .into());
        }
    }
    for k in &args.kind {
        crate::event::check_kind(k).map_err(|e| Error::bad_input(Some("--kind".into()), e))?;
    }
    if let Some(out) = &args.output {
        crate::outfile::check_not_ledger(out, &args.ledger.path())?;
    }
    Ok(format)
}

/// Writes the export to stdout or to `--output` (gzipped when its name ends in `.gz`).
fn write_output(
    args: &Args,
    ledger: &Ledger,
    filter: &Filter,
    how: &Output<'_>,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    match &args.output {
        None => {
            let stdout = io::stdout().lock();
            write_all(
                ledger,
                filter,
                how,
                io::BufWriter::with_capacity(1 << 16, stdout),
                bar,
            )?;
        }
        Some(path) => {
            // Never the ledger or its -wal/-shm/-journal; written beside the target and
            // renamed at the end: a failed export leaves no half-written file.
            let target = OutputFile::create(path, Some(&args.ledger.path()))?;
            let file = target.writer()?;
            if is_gz(path) {
                let gz = GzEncoder::new(file, flate2::Compression::default());
                let gz = write_all(ledger, filter, how, gz, bar)?;
                gz.finish()
                    .map_err(|e| Error::io(path, e))?
                    .flush()
                    .map_err(|e| Error::io(path, e))?;
            } else {
                write_all(ledger, filter, how, file, bar)?
                    .flush()
                    .map_err(|e| Error::io(path, e))?;
            }
            target.commit()?;
        }
    }
    Ok(())
}

/// Streams the selected events through the format's writer into `out`; returns `out`.
fn write_all<W: Write>(
    ledger: &Ledger,
    filter: &Filter,
    how: &Output<'_>,
    out: W,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<W> {
    let mut shared = Shared(std::rc::Rc::new(std::cell::RefCell::new(Some(out))));
    let mut sink = interchange::sink_with(how.format, shared.clone(), how.ctx, how.report)?;
    let mut io_err = None;
    ledger.scan(filter, &mut |ev| {
        bar.set_position(ev.id.max(0) as u64);
        if let Err(e) = sink.event(&ev) {
            io_err = Some(e);
            return Ok(false);
        }
        Ok(true)
    })?;
    if let Some(e) = io_err {
        return Err(e.into());
    }
    sink.finish()?;
    Ok(shared.take())
}

/// Events beyond which a report is slow to open (docs/report.md: about 5 s per 10^5 events to
/// the verdict on a small machine).
pub const REPORT_EVENTS_WARN: i64 = 200_000;

/// A report of more than [`REPORT_EVENTS_WARN`] events is written, with a warning naming the
/// window of the last 10^5 events to take instead.
fn warn_if_big(args: &Args, head: i64) {
    let from = args.since.unwrap_or(1).max(1);
    let to = args.until.map_or(head, |u| u.min(head));
    if to - from + 1 > REPORT_EVENTS_WARN {
        eprintln!(
            "pmm-export: warning: a report of {} events is slow to open and check in a browser \
             (docs/report.md); a window is quicker, e.g. --since {} for the last 100000",
            to - from + 1,
            (to - 99_999).max(1)
        );
    }
}

/// What the export writes: the format, what some formats say about the export, and what a
/// report says about itself.
struct Output<'a> {
    format: ExportFormat,
    ctx: &'a ExportContext,
    report: &'a ReportOptions,
}

/// The report's title and embedded checkpoint, checked before anything is written: the
/// checkpoint must open with the key (`--key`: a verifier key, a file holding one, or the
/// private key file, whose verifier is taken) and be about a tree the report holds.
fn report_options(args: &Args, format: ExportFormat) -> anyhow::Result<ReportOptions> {
    let html = format == ExportFormat::Html;
    let bad = |flag: &str, why: String| Error::bad_input(Some(flag.into()), why);
    if !html && (args.title.is_some() || args.embed_checkpoint.is_some()) {
        return Err(bad(
            "--title/--embed-checkpoint",
            "these go with --format html".into(),
        )
        .into());
    }
    if html && !args.kind.is_empty() {
        let why = "a report holds every event of its window (--since/--until): --kind would break its chain";
        return Err(bad("--kind", why.into()).into());
    }
    let mut opts = ReportOptions {
        title: args.title.clone().unwrap_or_default(),
        exported_at: crate::event::format_ts(args.clock.clock().now()),
        checkpoint: None,
    };
    if let (Some(file), Some(key)) = (&args.embed_checkpoint, &args.key) {
        let note = crate::cli::read_small_file(file)?;
        let vkey = verifier_key(key)?;
        let cp = crate::chain::note::open_checkpoint(&note, &vkey)
            .map_err(|e| bad("--embed-checkpoint", format!("{}: {e}", file.display())))?;
        if args.since.is_some_and(|s| s > 1) || args.until.is_some_and(|u| u < cp.size as i64) {
            let why = format!(
                "the checkpoint is about events 1 to {}: the report's window must hold them",
                cp.size
            );
            return Err(bad("--embed-checkpoint", why).into());
        }
        opts.checkpoint = Some(EmbeddedCheckpoint {
            note,
            key: vkey.to_text(),
        });
    }
    Ok(opts)
}

/// `--key` with `--embed-checkpoint`: the verifier key itself, a file holding it, or the
/// private key file (only its verifier key is used, and embedded).
fn verifier_key(key: &Path) -> anyhow::Result<VerifierKey> {
    let text = if key.is_file() {
        crate::cli::read_small_file(key)?
    } else {
        key.to_string_lossy().into_owned()
    };
    if let Ok(v) = VerifierKey::parse(&text) {
        return Ok(v);
    }
    match SignerKey::parse(&text) {
        Ok(s) => Ok(s.verifier()),
        Err(e) => Err(Error::bad_input(
            Some("--key".into()),
            format!("neither a verifier key nor a private key: {e}"),
        )
        .into()),
    }
}

/// Lets the sink own a writer that we get back afterwards (to finish a gzip stream).
struct Shared<W>(std::rc::Rc<std::cell::RefCell<Option<W>>>);

impl<W> Clone for Shared<W> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<W> Shared<W> {
    fn take(&mut self) -> W {
        match self.0.borrow_mut().take() {
            Some(w) => w,
            None => unreachable!("the writer is taken once, after the sink is finished"),
        }
    }
}

impl<W: Write> Write for Shared<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.0.borrow_mut().as_mut() {
            Some(w) => w.write(buf),
            None => Err(io::Error::other("writer already taken")),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.0.borrow_mut().as_mut() {
            Some(w) => w.write_all(buf),
            None => Err(io::Error::other("writer already taken")),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self.0.borrow_mut().as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

/// `--keygen NAME --key FILE`: a new key from the OS's random source, written with mode 0600
/// to a file that must not exist yet; the verifier key on stdout.
fn keygen(name: &str, path: &Path, db: &Path) -> anyhow::Result<Exit> {
    use std::os::unix::fs::OpenOptionsExt;
    crate::outfile::check_not_ledger(path, db)?;
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed)
        .map_err(|e| anyhow::anyhow!("no random bytes from the operating system: {e}"))?;
    let signer = SignerKey::from_seed(name, seed)
        .map_err(|e| Error::bad_input(Some("--keygen".into()), e.to_string()))?;
    seed.fill(0);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    file.write_all(format!("{}\n", signer.to_text()).as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(|e| Error::io(path, e))?;
    let mut out = io::stdout().lock();
    writeln!(out, "{}", signer.verifier().to_text())?;
    Ok(Exit::Success)
}

/// `--checkpoint --key FILE`: the signed checkpoint of the ledger's tree as it is now.
fn checkpoint(key: &Path, db: &Path) -> anyhow::Result<Exit> {
    let text = crate::cli::read_small_file(key)?;
    let signer = SignerKey::parse(&text)
        .map_err(|e| Error::bad_input(Some(key.display().to_string()), e.to_string()))?;
    let ledger = Ledger::open_reader(db)?;
    let (note, _) = crate::audit::prove::signed_checkpoint(&ledger, &signer)?;
    io::stdout().lock().write_all(note.as_bytes())?;
    Ok(Exit::Success)
}
