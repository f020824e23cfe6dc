//! `pmm-recall`: what the ledger remembers about a text.

use crate::cli::embed::EmbedArgs;
use crate::cli::{self, CommonArgs, Exit, LedgerArgs, Out, Program, WriteArgs};
use crate::event::{Clock, Kind};
use crate::llm::embed::Shared;
use crate::projection::checkpoint;
use crate::projection::state::Projections;
use crate::recall::{self, terms, Query, MAX_BUDGET};
use crate::store::{self, EventLog, Indexes, Ledger, RECALLED_KINDS};
use crate::Error;
use serde_json::json;

const AFTER_HELP: &str = "\
EXAMPLES:
  What the ledger remembers about a question, best first:
    pmm-recall 'what did Caroline paint?'
  Just the texts, or the ids and why each was picked:
    pmm-recall 'painting' | jq -r .content
    pmm-recall 'painting' | jq -c '{id, score, via}'
  Only user messages from May 2023, at most 5:
    pmm-recall --kind user_message --since 2023-05-01 --until 2023-05-31T23:59:59Z --k 5 'camping'
  A larger budget, and how the query was read:
    pmm-recall --budget 16000 --explain 'adoption agencies' | jq -c 'select(.type==\"explain\")'
  Many questions in one process (the state and the model are loaded once):
    pmm-recall --lines < questions.txt | jq -c '{line, id, via}'
  Rebuild every derived table (the full-text index first), then check them against the
  ledger:
    pmm-recall --reindex
    pmm-recall --check && echo index ok
  Recall by meaning too, with all-MiniLM-L6-v2 run in this process (docs/recall.md says
  how to get the model offline): embed the whole ledger once, then ask:
    export PMM_EMBED_MODEL=$HOME/models/all-MiniLM-L6-v2
    pmm-recall --embed
    pmm-recall 'the canvas she finished'
  The same with an Ollama embedding model:
    pmm-recall --embed-provider ollama --embed-model nomic-embed-text --embed

OUTPUT:
  One JSON line per recalled event, best first:
    {\"id\",\"ts\",\"kind\",\"content\",\"score\",\"via\"}
  score is the fused (reciprocal-rank) score; via says why: \"fts\" (full-text match),
  \"dense\" (near in meaning: the embedding model's vectors), \"neighbour-of:ID\" (the message
  before or after a match), \"concept:TOKEN\" (bound to a concept the text mentions),
  \"thread:CID\" (the story of a commitment bound to one), \"fact:TYPE=VALUE\" (the message a
  fact the indexer extracted came from: a name, a place, a tool; pmm-tick's index ticks),
  \"when:DAY\" or \"when:FIRST..LAST\" (the text names a date or a month - 'on 9 July, 2022',
  'in May 2023', '2023-05-08', 'yesterday', 'last week', '3 days ago' - and the event was told
  from a day before to a week after it; relative dates count from the newest event),
  \"speaker:NAME\" (the text names the speaker the message is labelled with - 'Melanie: ...',
  as transcripts and imported chats are written - and its score counted twice),
  \"corrects:ID\" (brought in because it corrects event ID, which matched).
  An event that a later event corrected (its meta.supersedes names it; pmm-append
  --supersedes) comes right after the event believed now in its place, and carries
  \"superseded_by\": {\"by\",\"source\",\"ts\",\"current\"} (who corrected it, when, and the
  end of the chain of corrections); --current leaves it out.
  --explain first prints {\"type\":\"explain\",\"terms\",\"budget\",\"index\"}: the search terms
  the text became (stop words and FTS5 syntax removed) and the index's state; with an
  embedding model also \"asked\": what the model embedded for the query (the text without
  the names of the speakers it names: 'What did paint?' for 'What did Melanie paint?').
  --timings prints {\"type\":\"timings\",\"project_ms\",\"embed_ms\",\"recall_ms\"} (loading the
  state; loading the model and embedding the text; recalling), with an embedding model also
  \"dense\": {\"model\",\"vectors\",\"nearest\",\"search_ms\",\"top\"} (the vector search alone, run
  once more to time it, and the ids of its 50 nearest); unlike everything else it differs from
  run to run.
  --lines prints the same records for each line of stdin, each with \"line\": N (its line
  number); the ledger's state and the model are loaded once, and the vector packs are kept
  in memory after the first question (about 104 bytes a vector; at most 160 MiB), so a file
  of questions is answered in one process: pmm-recall --lines < questions.txt | jq -c
  '{line, id}'.
  --reindex prints {\"type\":\"reindex\",\"events\",\"through\"}; --check prints one
  {\"type\":\"finding\",\"message\"} line per problem and {\"type\":\"check\",\"ok\",\"through\"};
  with an embedding model it also recomputes the model's stored vectors and reports each
  whose cosine with the stored one is below 0.995 ({\"type\":\"finding\",\"id\",\"cosine\"}).
  --embed prints {\"type\":\"embed\",\"model\",\"embedded\",\"missing\",\"interrupted\"}.

SEMANTIC RECALL:
  With an embedding model (--embed-provider/--embed-model, PMM_EMBED_*, or the ledger's
  retrieval config keys embed, embed_model, embed_url) the text is also embedded and the
  events nearest in meaning are a fourth source. Vectors are stored in the ledger file per
  model (pmm_ tables; never compared across models); turns embed their messages, --embed
  fills in the rest (resumable; Ctrl-C stops it keeping what it finished). A server that is
  down leaves recall to the other sources (a warning on stderr).

  Recalled kinds: user_message, assistant_message, reflection, summary_update,
  lifetime_memory, claim, commitment_open, commitment_close. The index lives in the ledger
  file (pmm_ tables, never part of the chain or of exports); every writer keeps it up to date
  in the same transaction as its events, and builds it again from the ledger when a table of
  it is missing. A read-only ledger without a whole index, or whose index lags (another
  program appended), is indexed in memory for this run when at most 100000 events are
  missing.

EXIT STATUS:
  0  answered (no match prints nothing); --check: the derived tables match the ledger
  1  --check: a derived table does not match the ledger (findings on stdout)
  2  missing ledger, not a ledger, bad arguments, no text to recall, a missing or corrupt
     model directory, a model whose dimensions differ from its stored vectors
  3  --embed, --check: the embedding server failed (what was finished is kept)
  130  --embed interrupted by SIGINT (what was finished is kept)

ENVIRONMENT:
  PMM_DB    the ledger when --db is not given (default .data/pmmdb/pmm.db)
  PMM_EMBED_PROVIDER  local, ollama, openai or none (--embed-provider)
  PMM_EMBED_MODEL     a model directory (local) or a model name (--embed-model)
  PMM_EMBED_URL       the embedding server (--embed-url; default $OLLAMA_HOST or
                      $OPENAI_BASE_URL)
  PMM_EMBED_API_KEY   the embedding server's key (default $OPENAI_API_KEY; never shown)
  RAYON_NUM_THREADS   threads of the in-process model: a query runs on 1 unless this is set;
                      --embed and --check use every core
  XDG_CACHE_HOME      where the in-process model's weights digest (its id) is cached, in
                      pmm/weights-sha256 (default ~/.cache): hashing 91 MB costs ~50 ms";

/// Recall from the whole ledger: the events that match a text, best first, within a budget.
///
/// Ranks every recallable event of the ledger against TEXT by full text (BM25 over the index in
/// the ledger, each match bringing the messages around it) and by the concepts and commitment
/// threads TEXT mentions, fuses the rankings, and prints the best events that fit the budget.
/// The same ledger always gives the same answer.
#[derive(Debug, clap::Parser)]
#[command(name = "pmm-recall", version, after_long_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    write: WriteArgs,
    #[command(flatten)]
    model: EmbedArgs,

    /// What to recall (words, a question)
    #[arg(value_name = "TEXT")]
    text: Option<String>,

    /// At most this many events
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    k: Option<u64>,

    /// Characters of event text to print at most (each event counts up to 600)
    #[arg(long, value_name = "CHARS", default_value_t = recall::DEFAULT_BUDGET as u64,
          value_parser = clap::value_parser!(u64).range(1..=MAX_BUDGET as u64))]
    budget: u64,

    /// Only events of this kind (repeatable)
    #[arg(long, value_name = "KIND")]
    kind: Vec<String>,

    /// Only events at or after this time (RFC 3339, or a date YYYY-MM-DD)
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    since: Option<String>,

    /// Only events at or before this time (RFC 3339, or a date YYYY-MM-DD: its start)
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    until: Option<String>,

    /// Only what is believed now: leave out the events a later event corrected
    /// (meta.supersedes); without it each comes after its successor, labelled superseded_by
    #[arg(long)]
    current: bool,

    /// Also print how the text was read and the index's state
    #[arg(long)]
    explain: bool,

    /// Also print where the time went (milliseconds per stage; the vector search alone)
    #[arg(long)]
    timings: bool,

    /// Rebuild every derived table from the ledger (a write: the full-text index, the Merkle
    /// tree, the vector packs, the projection checkpoints; a missing table is made again) and
    /// print the counts
    #[arg(long, conflicts_with_all = ["text", "check"])]
    reindex: bool,

    /// Check that the derived tables match the ledger (exit 1 with findings when they do not)
    #[arg(long, conflicts_with = "text")]
    check: bool,

    /// Embed every recallable event that has no vector of the embedding model yet (a write;
    /// resumable) and print the counts
    #[arg(long = "embed", conflicts_with_all = ["text", "check", "reindex"])]
    backfill: bool,

    /// Recall for each line of stdin (one text per line; blank lines are skipped), loading
    /// the ledger's state and the model once; every record gains "line": N
    #[arg(long, conflicts_with_all = ["text", "check", "reindex", "backfill"])]
    lines: bool,
}

impl Program for Args {
    fn common(&self) -> &CommonArgs {
        &self.common
    }
    /// Queries embed one text each; `--embed` and `--check` embed batches on every core.
    fn embeds_single_texts(&self) -> bool {
        !(self.backfill || self.check)
    }
}

/// A `--since`/`--until` that is not a time.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not an RFC 3339 time or a YYYY-MM-DD date")]
struct BadTime(String);

/// A time bound in the ledger's `ts` form, so that it compares as text.
fn parse_time(s: &str) -> Result<String, BadTime> {
    let full = if s.len() == 10 {
        format!("{s}T00:00:00Z")
    } else {
        s.to_string()
    };
    Clock::pinned(&full)
        .map(|c| c.ts())
        .map_err(|_| BadTime(s.to_string()))
}

/// Runs `pmm-recall`.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    let path = args.ledger.path();
    if args.reindex {
        let mut ledger = Ledger::open_writer(&path, args.write.busy_timeout)?;
        let events = ledger.reindex()?;
        let mut out = Out::new();
        out.record(&json!({"type": "reindex", "events": events, "through": ledger.max_id()?}))?;
        out.flush()?;
        return Ok(Exit::Success);
    }
    if args.check {
        return check(&args, &Ledger::open_for_check(&path)?);
    }
    if args.backfill {
        return embed(&args, &path);
    }
    for k in &args.kind {
        if !RECALLED_KINDS.contains(&k.as_str()) {
            return Err(Error::bad_input(
                Some("--kind".into()),
                format!(
                    "'{k}' is not a recalled kind ({})",
                    RECALLED_KINDS.join(", ")
                ),
            )
            .into());
        }
    }
    if args.lines {
        return ask_lines(&args, &path);
    }
    let Some(text) = args.text.as_deref().filter(|t| !t.trim().is_empty()) else {
        return Err(Error::bad_input(
            None,
            "give the text to recall (or --lines, --reindex, --check; see 'pmm-recall --help')",
        )
        .into());
    };
    let ledger = Ledger::open_reader(&path)?;
    let started = std::time::Instant::now();
    let p: Projections = checkpoint::project(&ledger, None, true)?.projections;
    let projected = started.elapsed();
    let embedder = args.model.open(&ledger)?;
    let setup = Setup {
        project: projected,
        load: started.elapsed() - projected,
    };
    let mut out = Out::new();
    ask(
        &args,
        &ledger,
        &p,
        embedder.as_ref(),
        text,
        None,
        setup,
        &mut out,
    )?;
    out.flush()?;
    if let Some(e) = &embedder {
        note_other_spaces(
            &ledger,
            e,
            " (pmm-recall --embed embeds the events for this one)",
        )?;
    }
    Ok(Exit::Success)
}

/// A note on stderr for each other vector space of the model's name with more vectors than
/// its own ([`recall::vectors::other_spaces`]).
fn note_other_spaces(ledger: &Ledger, e: &Shared, hint: &str) -> anyhow::Result<()> {
    let id = e.id();
    for (other, n) in recall::vectors::other_spaces(ledger, &id)? {
        eprintln!(
            "pmm-recall: note: the ledger holds {n} vectors of {other}, which are not {id}'s (other weights, another model behind the name, or an older pmm's fingerprint) and are not used{hint}"
        );
    }
    Ok(())
}

/// `--lines`: every line of stdin is a text to recall, against one loaded state and model.
fn ask_lines(args: &Args, path: &std::path::Path) -> anyhow::Result<Exit> {
    let mut ledger = Ledger::open_reader(path)?;
    ledger.keep_vector_packs(Default::default());
    let started = std::time::Instant::now();
    let p: Projections = checkpoint::project(&ledger, None, true)?.projections;
    let projected = started.elapsed();
    let embedder = args.model.open(&ledger)?;
    let mut setup = Setup {
        project: projected,
        load: started.elapsed() - projected,
    };
    let mut out = Out::new();
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut buf = Vec::new();
    let mut line = 0u64;
    loop {
        let n = crate::lines::read_line_default(&mut input, &mut buf)
            .map_err(|e| Error::bad_input(Some(format!("stdin:{}", line + 1)), e.to_string()))?;
        if n == 0 {
            break;
        }
        line += 1;
        let text = std::str::from_utf8(crate::lines::trim_eol(&buf)).map_err(|_| {
            Error::bad_input(Some(format!("stdin:{line}")), "the line is not UTF-8")
        })?;
        if text.trim().is_empty() {
            continue;
        }
        ask(
            args,
            &ledger,
            &p,
            embedder.as_ref(),
            text,
            Some(line),
            setup,
            &mut out,
        )?;
        setup = Setup::default();
        out.flush()?;
        if cli::stdout_closed() {
            break;
        }
    }
    Ok(Exit::Success)
}

/// The time spent before the first text: loading the state, loading the model.
#[derive(Debug, Clone, Copy, Default)]
struct Setup {
    project: std::time::Duration,
    load: std::time::Duration,
}

/// Recalls for one text and prints its records (`line`: its line under `--lines`; `setup`:
/// what `--timings` adds to this text's figures).
#[allow(clippy::too_many_arguments)]
fn ask(
    args: &Args,
    ledger: &Ledger,
    p: &Projections,
    embedder: Option<&Shared>,
    text: &str,
    line: Option<u64>,
    setup: Setup,
    out: &mut Out,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    // What the model is asked: the text without the speakers it names.
    let asked = match embedder {
        Some(_) => ledger.in_snapshot(|l| recall::speakers::dense_text(l, text))?,
        None => None,
    };
    let dense = query_vector(embedder, ledger, asked.as_deref().unwrap_or(text))?;
    let embedded = started.elapsed();
    let q = Query {
        dense,
        budget: args.budget as usize,
        k: args.k.map(|k| k as usize),
        kinds: args.kind.iter().map(|k| Kind::from(k.as_str())).collect(),
        since: args.since.clone(),
        until: args.until.clone(),
        current: args.current,
        ..Query::new(text, i64::MAX)
    };
    // One read transaction for the many small reads (and one snapshot for all of them).
    let found = ledger.in_snapshot(|l| recall::recall(l, p, &q))?;
    let recalled = started.elapsed();
    let mut record = |mut v: serde_json::Value| -> anyhow::Result<()> {
        if let Some(n) = line {
            v["line"] = json!(n);
        }
        out.record(&v)?;
        Ok(())
    };
    if args.explain {
        let asked = embedder.map(|_| asked.as_deref().unwrap_or(text));
        record(explain_record(ledger, text, q.budget, asked)?)?;
    }
    if args.timings {
        let dense = q.dense.as_ref();
        record(timings_record(ledger, setup, embedded, recalled, dense)?)?;
    }
    for r in found {
        record(crate::context::retrieval::recalled_json(&r))?;
        if cli::stdout_closed() {
            break;
        }
    }
    Ok(())
}

/// The `explain` record: the text's query terms, the budget, the full-text index's lag behind
/// the head, and (`asked`, with a model) the text the model was asked.
fn explain_record(
    ledger: &Ledger,
    text: &str,
    budget: usize,
    asked: Option<&str>,
) -> anyhow::Result<serde_json::Value> {
    let mut x = json!({
        "type": "explain",
        "terms": terms::query_terms(text),
        "budget": budget,
        "index": {"lag": ledger.lag(store::Derived::Text)?, "head": ledger.max_id()?},
    });
    if let Some(asked) = asked {
        x["asked"] = json!(asked);
    }
    Ok(x)
}

/// The `timings` record, in milliseconds to a tenth: the setup, the embedding (with the
/// model's load), the recall, and with a dense query a timed nearest-vector search of its own.
fn timings_record(
    ledger: &Ledger,
    setup: Setup,
    embedded: std::time::Duration,
    recalled: std::time::Duration,
    dense: Option<&recall::DenseQuery>,
) -> anyhow::Result<serde_json::Value> {
    let ms = |d: std::time::Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
    let mut t = json!({
        "type": "timings",
        "project_ms": ms(setup.project),
        "embed_ms": ms(setup.load + embedded),
        "recall_ms": ms(recalled - embedded),
    });
    if let Some(d) = dense {
        let at = std::time::Instant::now();
        let hits = ledger.vector_search(&d.model, &d.vector, i64::MAX, recall::dense::NEAREST)?;
        let took = at.elapsed();
        let models = ledger.vector_models()?;
        t["dense"] = json!({
            "model": d.model,
            "vectors": models.iter().find(|m| m.0 == d.model).map_or(0, |m| m.2),
            "nearest": hits.len(),
            "search_ms": ms(took),
            "top": hits.iter().take(50).map(|h| h.0).collect::<Vec<i64>>(),
        });
    }
    Ok(t)
}

/// The text's vector for the dense source: `None` without a model, or (with a warning) when
/// the server fails; a model that does not fit its stored vectors is bad input.
fn query_vector(
    e: Option<&Shared>,
    ledger: &Ledger,
    text: &str,
) -> anyhow::Result<Option<recall::DenseQuery>> {
    let Some(e) = e else {
        return Ok(None);
    };
    let vector = match e.embed(&[recall::vectors::embed_text(text)]) {
        Ok(mut v) => v.pop().unwrap_or_default(),
        Err(err) if err.is_config() => return Err(Error::bad_input(None, err.to_string()).into()),
        Err(err) => {
            eprintln!("pmm-recall: warning: {err}; recalling without the dense source");
            return Ok(None);
        }
    };
    if let Some(m) = ledger.vector_model(&e.id())? {
        if m.dim != vector.len() {
            return Err(Error::bad_input(
                None,
                format!(
                    "embedding model {} gives {} dimensions, but its stored vectors have {}",
                    e.id(),
                    vector.len(),
                    m.dim
                ),
            )
            .into());
        }
    }
    Ok(Some(recall::DenseQuery {
        model: e.id(),
        vector,
    }))
}

/// `--embed`: the backfill.
fn embed(args: &Args, path: &std::path::Path) -> anyhow::Result<Exit> {
    let mut ledger = Ledger::open_writer(path, args.write.busy_timeout)?;
    let Some(e) = args.model.open(&ledger)? else {
        return Err(Error::bad_input(
            Some("--embed".into()),
            "no embedding model: give --embed-model DIR (or --embed-provider ollama|openai --embed-model NAME, or PMM_EMBED_MODEL)",
        )
        .into());
    };
    let cancel = crate::llm::Cancel::new();
    cancel.on_signals()?;
    let _armed = cancel.arm();
    let bar = cli::progress(0, args.common.quiet, "embedding");
    let done =
        recall::vectors::backfill(&mut ledger, &e, &|| cancel.is_cancelled(), &mut |d, t| {
            bar.set_length(t);
            bar.set_position(d);
        });
    bar.finish_and_clear();
    let done = done.map_err(backfill_error)?;
    note_other_spaces(&ledger, &e, "")?;
    let mut out = Out::new();
    out.record(&json!({
        "type": "embed",
        "model": e.id(),
        "embedded": done.embedded,
        "missing": done.missing,
        "interrupted": done.interrupted,
    }))?;
    out.flush()?;
    if let Some(signal) = cancel.signal().filter(|_| done.interrupted) {
        std::process::exit(128 + signal);
    }
    Ok(Exit::Success)
}

/// A failed backfill or check: a setup mistake is bad input, a server's failure its own error.
fn backfill_error(e: recall::vectors::BackfillError) -> anyhow::Error {
    use crate::llm::embed::EmbedError;
    use recall::vectors::BackfillError;
    match e {
        BackfillError::Store(e) => e.into(),
        BackfillError::Embed(e) if e.is_config() => Error::bad_input(None, e.to_string()).into(),
        BackfillError::Embed(EmbedError::Server(e)) => Error::from(e).into(),
        // "embedding at MODEL: unexpected response: a vector of 4 dimensions, not 3".
        BackfillError::Embed(EmbedError::Compute { model, detail }) => {
            Error::from(crate::llm::LlmError::BadResponse {
                provider: "embedding".into(),
                endpoint: model,
                detail,
            })
            .into()
        }
        BackfillError::Embed(e) => Error::from(crate::llm::LlmError::BadResponse {
            provider: "embedding".into(),
            endpoint: String::new(),
            detail: e.to_string(),
        })
        .into(),
    }
}

/// `--check`: the index against the ledger, and the embedding model's vectors against a
/// recomputation when a model is configured.
fn check(args: &Args, ledger: &Ledger) -> anyhow::Result<Exit> {
    let mut findings = ledger.check_derived()?;
    let mut out = Out::new();
    for f in &findings {
        out.record(&json!({"type": "finding", "message": f}))?;
    }
    if let Some(e) = args.model.open(ledger)? {
        let bar = cli::progress(0, args.common.quiet, "checking vectors");
        let checked = recall::vectors::check(ledger, &e, usize::MAX, &mut |d, t| {
            bar.set_length(t);
            bar.set_position(d);
        });
        bar.finish_and_clear();
        let (bad, _) = checked.map_err(backfill_error)?;
        note_other_spaces(ledger, &e, " (--check compares this one's only)")?;
        for m in &bad {
            let message = format!(
                "event {}: its {} vector has cosine {:.4} with a recomputed one (below {})",
                m.id,
                e.id(),
                m.cosine,
                recall::vectors::CHECK_TOLERANCE
            );
            out.record(
                &json!({"type": "finding", "id": m.id, "cosine": m.cosine, "message": message}),
            )?;
            findings.push(message);
        }
    }
    out.record(&json!({
        "type": "check",
        "ok": findings.is_empty(),
        "through": ledger.max_id()? - ledger.lag(store::Derived::Text)?.unwrap_or(0) as i64,
    }))?;
    out.flush()?;
    Ok(if findings.is_empty() {
        Exit::Success
    } else {
        Exit::Negative
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_bound_is_a_date_or_an_rfc_3339_time() {
        assert_eq!(
            parse_time("2025-11-24").unwrap(),
            "2025-11-24T00:00:00.000000Z"
        );
        assert_eq!(parse_time("soon"), Err(BadTime("soon".into())));
        assert_eq!(
            parse_time("soon").unwrap_err().to_string(),
            "'soon' is not an RFC 3339 time or a YYYY-MM-DD date"
        );
    }
}
