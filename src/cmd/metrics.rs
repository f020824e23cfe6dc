//! `pmm-metrics`: deterministic ledger metrics.

use crate::cli::{ClockArgs, CommonArgs, Exit, LedgerArgs, Out, Program, WriteArgs};
use crate::event::{Kind, NewEvent};
use crate::store::EventLog;
use crate::store::Ledger;

const AFTER_HELP: &str = "\
EXAMPLES:
  The metrics, pretty:
    pmm-metrics | jq .
  Compare two ledgers (the one measured field left out):
    diff <(pmm-metrics --deterministic --db a.db) <(pmm-metrics --deterministic --db b.db)
  Open commitments by cid:
    pmm-metrics | jq -r '.open_commitments[]'
  Record the metrics in the ledger when they changed (from cron):
    pmm-metrics --append --quiet > /dev/null
  The last five turns' model metrics:
    pmm-metrics --diag | jq -r .content

OUTPUT:
  One {\"type\":\"metrics\"} object: event_count and kinds (metrics_update events left out, as
  the reference does), broken_links, hash_mismatches, last_hash, open_commitments and
  closed_commitments (cids), internal_goals_open, internal_goals_worked, turns, autonomy
  {ticks, decisions, last_reflection_id}, adaptation {stability, coherence, policy_update,
  meta_policy_update (the newest of each: id and content, or null), outcomes (per action kind:
  success, no_delta, failure, partial)}, replay_ms_per_event. With --append, the appended metrics_update event
  follows on its own line.

EXIT STATUS:
  0  success
  2  missing ledger, database error

ENVIRONMENT:
  PMM_DB    the ledger when --db is not given (default .data/pmmdb/pmm.db)
  PMM_NOW   pin the clock for the --append event";

/// Deterministic ledger metrics: counts, chain health, commitments, autonomy.
///
/// Reads the whole ledger once, recomputing every hash, and prints one JSON object. The same
/// ledger gives the same object on every machine, except replay_ms_per_event, which measures
/// this run (--deterministic leaves it out).
#[derive(Debug, clap::Parser)]
#[command(name = "pmm-metrics", version, after_long_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    clock: ClockArgs,
    #[command(flatten)]
    write: WriteArgs,
    #[command(flatten)]
    common: CommonArgs,

    /// Leave out the measured, non-deterministic field (replay_ms_per_event)
    #[arg(long)]
    deterministic: bool,
    /// Append a metrics_update event (reference text format) when the metrics changed since
    /// the last one
    #[arg(long, conflicts_with = "diag")]
    append: bool,
    /// Print the last five metrics_turn events instead (per-turn model diagnostics)
    #[arg(long)]
    diag: bool,
}

impl Program for Args {
    fn common(&self) -> &CommonArgs {
        &self.common
    }
}

/// Computes the metrics of the ledger at `path` ([`crate::audit::metrics::compute`]) with a
/// progress bar on a large ledger.
pub fn compute(
    path: &std::path::Path,
    max_id: i64,
    quiet: bool,
) -> anyhow::Result<crate::metrics::LedgerMetrics> {
    let bar = crate::cli::progress(1_000_000, quiet || max_id < 100_000, "metrics");
    let m = crate::audit::metrics::compute(path, &|x| bar.set_position(x))?;
    bar.finish_and_clear();
    Ok(m)
}

/// Runs `pmm-metrics`.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    let mut out = Out::new();
    let path = args.ledger.path();
    if args.diag {
        let ledger = Ledger::open_reader(&path)?;
        let mut turns = ledger.last_of_kind(Kind::MetricsTurn, 5)?;
        turns.reverse();
        for ev in &turns {
            out.event(ev)?;
        }
        out.flush()?;
        return Ok(Exit::Success);
    }
    let ledger = if args.append {
        crate::cli::open_writer(&path, args.write.busy_timeout, args.common.quiet)?
    } else {
        Ledger::open_reader(&path)?
    };
    let mut m = compute(&path, ledger.max_id()?, args.common.quiet)?;
    let appended = if args.append {
        let text = m.update_text();
        let last = ledger.last_of_kind(Kind::MetricsUpdate, 1)?;
        if last.first().map(|e| e.content.as_str()) == Some(text.as_str()) {
            None
        } else {
            let mut ledger = ledger;
            let ev = NewEvent::new(Kind::MetricsUpdate, text, Default::default())
                .map_err(|e| crate::Error::bad_input(None, e))?;
            Some(crate::session::append(
                &mut ledger,
                &ev,
                &args.clock.clock(),
            )?)
        }
    } else {
        None
    };
    if args.deterministic {
        m.replay_ms_per_event = None;
    }
    out.record(&m)?;
    if let Some(ev) = appended {
        out.event(&ev)?;
    }
    out.flush()?;
    Ok(Exit::Success)
}
