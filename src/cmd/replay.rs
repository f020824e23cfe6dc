//! `pmm-replay`: stream events; project state at any event; follow new events.

use crate::cli::{CommonArgs, Exit, LedgerArgs, Out, Program};
use crate::projection::checkpoint::{keeping, project, CHECKPOINT_EVERY};
use crate::store::{save_reader_checkpoint, EventLog};
use crate::store::{Filter, Ledger};
use crate::Error;
use clap::builder::TypedValueParser as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

const AFTER_HELP: &str = "\
EXAMPLES:
  Every event, as JSON Lines:
    pmm-replay | jq -c '{id, kind}'
  The last 20 reflections:
    pmm-replay --kind reflection --tail 20 | jq -r .content
  Watch a live ledger (new events appear within a second; Ctrl-C ends it):
    pmm-replay --follow --tail 0 | jq --unbuffered -c 'select(.kind==\"reflection\")'
  The state at event 171, and what the agent has open now:
    pmm-replay --state --at 171 | jq .rsm
    pmm-replay --diff 100 171 | jq .tendencies_delta
    pmm-replay --state | jq -r '.open_commitments[] | \"\\(.cid) \\(.text)\"'
  The exact prompt turn 42 sent, rebuilt from the ledger and checked against its digest:
    pmm-replay --prompt 42 | jq -r .system
  A quick look at the newest events:
    pmm-replay --narrate

OUTPUT:
  Events as JSON Lines {\"id\",\"ts\",\"kind\",\"content\",\"meta\",\"prev_hash\",\"hash\"}; with --state
  one {\"type\":\"state\"} object (open commitments, identity, thresholds, retrieval config,
  the self-model \"rsm\" exactly as the reference's snapshot, graph stats, concept metrics, last_event_id,
  last_hash); with --diff one {\"type\":\"rsm_diff\"} object; with --prompt one
  {\"type\":\"prompt\"} object (system, history, user, reply, reply_to, prompt_format,
  prompt_sha256, recorded_sha256, matches); with --narrate a human table.

CHECKPOINTS:
  --state folds from the newest projection checkpoint (a cache table, pmm_checkpoints) that
  still matches the ledger, and saves a new one when it had to fold 1,000 events or more and
  the file is writable. A missing, stale or foreign checkpoint is ignored; --check-fast proves
  that a checkpointed rebuild equals a full one.

EXIT STATUS:
  0  success (also when a reader closes the pipe, and on SIGINT/SIGTERM with --follow)
  1  --check-fast: the checkpointed and the full rebuild differ; --prompt: the rebuilt
     prompt's sha256 differs from the reply's prompt_sha256
  2  missing or unreadable ledger, bad arguments (--at beyond the last event or below 1;
     --prompt naming no turn, or a turn of an older prompt format)

ENVIRONMENT:
  PMM_DB    the ledger when --db is not given (default .data/pmmdb/pmm.db)";

/// Stream a ledger's events, follow new ones, or project its state at any event.
///
/// Without options prints every event in id order as JSON Lines. Projections (open
/// commitments, identity, thresholds, the retrieval config) are pure folds over the events:
/// --state prints them as of the last event, or --at an earlier one, identically on every run,
/// starting from a projection checkpoint when one matches the ledger.
#[derive(Debug, clap::Parser)]
#[command(name = "pmm-replay", version, after_long_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    common: CommonArgs,

    /// Only events with id ≥ ID
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(i64).range(0..), allow_negative_numbers = true)]
    since: Option<i64>,
    /// Only events with id ≤ ID
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(i64).range(0..), allow_negative_numbers = true)]
    until: Option<i64>,
    /// Only the last N events (after the other filters)
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i64).range(0..).map(|v| v as usize)
    )]
    tail: Option<usize>,
    /// Only events of this kind (repeatable)
    #[arg(long, value_name = "KIND")]
    kind: Vec<String>,
    /// Keep running and print events as other processes append them
    #[arg(long, conflicts_with_all = ["state", "narrate", "until"])]
    follow: bool,
    /// Print the projected state instead of events
    #[arg(long, conflicts_with = "narrate")]
    state: bool,
    /// With --state: the state as of this event
    #[arg(
        long,
        value_name = "ID",
        requires = "state",
        allow_negative_numbers = true
    )]
    at: Option<i64>,
    /// What changed in the self-model between event A and event B
    #[arg(long, num_args = 2, value_names = ["A", "B"], allow_negative_numbers = true, conflicts_with_all = ["state", "narrate", "follow"])]
    diff: Option<Vec<i64>>,
    /// A human table of the last 50 events (or --tail N)
    #[arg(long)]
    narrate: bool,
    /// Rebuild the state from the newest checkpoint and from scratch and report whether they
    /// agree (exit 1 when they differ)
    #[arg(long, conflicts_with_all = ["state", "narrate", "follow"])]
    check_fast: bool,
    /// Rebuild the exact prompt of the turn whose assistant or user message is event ID, from
    /// the state as of that turn and its recorded retrieval_selection, and check it against the
    /// reply's prompt_sha256 (exit 1 when they differ); or of a thinking tick's reply (pmm-tick
    /// --adapter), from the ledger up to its slot's stimulus
    #[arg(long, value_name = "ID", allow_negative_numbers = true, conflicts_with_all = ["state", "narrate", "follow", "check_fast", "diff"])]
    prompt: Option<i64>,
}

impl Program for Args {
    fn common(&self) -> &CommonArgs {
        &self.common
    }
}

/// Runs `pmm-replay`: one of its modes.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    for k in &args.kind {
        crate::event::check_kind(k).map_err(|e| Error::bad_input(Some("--kind".into()), e))?;
    }
    let mut ledger = Ledger::open_reader(&args.ledger.path())?;
    let mut out = Out::new();
    let last = ledger.max_id()?;
    if args.state {
        return state(&args, &ledger, last, &mut out);
    }
    if let Some(ab) = &args.diff {
        return diff(&ledger, ab, last, &mut out);
    }
    if args.check_fast {
        return check_fast(&ledger, &mut out);
    }
    if let Some(id) = args.prompt {
        return prompt(&ledger, id, &mut out);
    }
    let filter = Filter {
        since: args.since,
        until: args.until,
        kinds: args
            .kind
            .iter()
            .map(|k| crate::event::Kind::from(k.as_str()))
            .collect(),
    };
    if args.narrate {
        for ev in ledger.tail(&filter, args.tail.unwrap_or(50))? {
            out.raw(crate::cli::line::event(&ev, crate::cli::line::Style::Narrated).as_bytes())?;
            out.raw(b"\n")?;
        }
        out.flush()?;
        return Ok(Exit::Success);
    }
    let next = stream(&args, &ledger, &filter, last, &mut out)?;
    if !args.follow {
        return Ok(Exit::Success);
    }
    follow(&args, &mut ledger, next, &mut out)
}

/// `--at` or `--diff`'s ids must be events of the ledger.
fn in_ledger(flag: &str, id: i64, last: i64) -> anyhow::Result<()> {
    if id < 1 || id > last {
        return Err(Error::bad_input(
            Some(flag.into()),
            format!("event {id} is not in the ledger (events 1..{last})"),
        )
        .into());
    }
    Ok(())
}

/// `--state [--at ID]`: the projections as one JSON line (saving a checkpoint only where a
/// pmm writer made the cache table).
fn state(args: &Args, ledger: &Ledger, last: i64, out: &mut Out) -> anyhow::Result<Exit> {
    if let Some(at) = args.at {
        in_ledger("--at", at, last)?;
    }
    let projected = project(ledger, args.at, true)?;
    out.with_writer(|w| {
        projected.projections.state_record().write_json(w)?;
        w.write_all(b"\n")
    })?;
    out.flush()?;
    if projected.folded >= CHECKPOINT_EVERY {
        keeping(&projected.projections, |c| {
            save_reader_checkpoint(&args.ledger.path(), c)
        });
    }
    Ok(Exit::Success)
}

/// `--diff A B`: how the self-model changed between two events.
fn diff(ledger: &Ledger, ab: &[i64], last: i64, out: &mut Out) -> anyhow::Result<Exit> {
    for &id in ab {
        in_ledger("--diff", id, last)?;
    }
    let a = project(ledger, Some(ab[0]), true)?.projections;
    let b = project(ledger, Some(ab[1]), true)?.projections;
    let d = crate::projection::rsm::diff(&a.rsm, &b.rsm);
    out.record(&serde_json::json!({
        "type": "rsm_diff",
        "from": ab[0],
        "to": ab[1],
        "tendencies_delta": d.tendencies_delta,
        "gaps_added": d.gaps_added,
        "gaps_resolved": d.gaps_resolved,
    }))?;
    out.flush()?;
    Ok(Exit::Success)
}

/// `--check-fast`: the checkpointed projections against a full rebuild (exit 1 if they differ).
fn check_fast(ledger: &Ledger, out: &mut Out) -> anyhow::Result<Exit> {
    let fast = project(ledger, None, true)?;
    let full = project(ledger, None, false)?;
    let identical = fast.projections == full.projections;
    out.record(&serde_json::json!({
        "type": "check_fast",
        "checkpoint_at": fast.from_checkpoint,
        "folded_after_checkpoint": fast.folded,
        "events": full.folded,
        "identical": identical,
    }))?;
    out.flush()?;
    Ok(if identical {
        Exit::Success
    } else {
        Exit::Negative
    })
}

/// `--prompt ID`: the turn's prompt rebuilt from the ledger, as one `{"type":"prompt"}` record
/// (exit 1 when its digest differs from the recorded one; exit 2 when event ID is not a turn
/// of a prompt format this build rebuilds).
fn prompt(ledger: &Ledger, id: i64, out: &mut Out) -> anyhow::Result<Exit> {
    use crate::context::prompt as cp;
    let bad = |e: cp::RebuildError| Error::bad_input(Some("--prompt".into()), e.to_string());
    if let Some(reply) = ledger.get(id)? {
        if let Some((rebuilt, recorded)) = crate::kernel::think::rebuild(ledger, &reply)? {
            let meta = reply.meta_map().unwrap_or_default();
            let format = meta.get("prompt_format").cloned().unwrap_or_default();
            return thought_prompt(id, &rebuilt, &recorded, format, out);
        }
    }
    let turn = cp::turn_of(ledger, id)?.map_err(bad)?;
    let rebuilt = cp::rebuild(ledger, &turn)?.map_err(bad)?;
    let sha = rebuilt.sha256();
    let matches = sha == turn.recorded;
    let mut record = rebuilt.to_json();
    record["type"] = "prompt".into();
    record["reply"] = turn.reply.into();
    record["reply_to"] = turn.user_id.into();
    record["prompt_format"] = turn.format.into();
    record["prompt_sha256"] = sha.clone().into();
    record["recorded_sha256"] = turn.recorded.clone().into();
    record["matches"] = matches.into();
    out.record(&record)?;
    out.flush()?;
    if matches {
        return Ok(Exit::Success);
    }
    eprintln!(
        "pmm-replay: the prompt of turn {} rebuilt from the ledger hashes to {sha}, but the reply records prompt_sha256 {}: the ledger no longer gives the prompt that was sent",
        turn.reply, turn.recorded
    );
    Ok(Exit::Negative)
}

/// `--prompt ID` of a thinking tick's reply (`kernel::think`): its prompt rebuilt from the
/// ledger, as for a turn, without `reply_to` (it answers no user message).
fn thought_prompt(
    id: i64,
    rebuilt: &crate::context::prompt::Prompt,
    recorded: &str,
    format: serde_json::Value,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let sha = rebuilt.sha256();
    let matches = sha == recorded;
    let mut record = rebuilt.to_json();
    record["type"] = "prompt".into();
    record["reply"] = id.into();
    record["prompt_format"] = format;
    record["prompt_sha256"] = sha.clone().into();
    record["recorded_sha256"] = recorded.into();
    record["matches"] = matches.into();
    out.record(&record)?;
    out.flush()?;
    if matches {
        return Ok(Exit::Success);
    }
    eprintln!(
        "pmm-replay: the prompt of thinking tick reply {id} rebuilt from the ledger hashes to {sha}, but the reply records prompt_sha256 {recorded}: the ledger no longer gives the prompt that was sent"
    );
    Ok(Exit::Negative)
}

/// The events (all, `--tail N`, or a range), as JSON Lines; the id to follow from (`None`
/// after an id of `i64::MAX`, which no event can follow).
fn stream(
    args: &Args,
    ledger: &Ledger,
    filter: &Filter,
    last: i64,
    out: &mut Out,
) -> anyhow::Result<Option<i64>> {
    let next = match args.tail {
        Some(n) => {
            let events = ledger.tail(filter, n)?;
            for ev in &events {
                out.event(ev)?;
            }
            // With --tail 0 --follow, only events appended from now on.
            events
                .last()
                .map_or(last, |e| e.id)
                .max(if n == 0 { last } else { 0 })
                .checked_add(1)
        }
        None => {
            let mut seen = filter.since.unwrap_or(1).max(1) - 1;
            ledger.scan(filter, &mut |ev| {
                seen = ev.id;
                out.event(&ev).map_err(|e| Error::io("<stdout>", e))?;
                Ok(true)
            })?;
            seen.max(if args.follow { last } else { 0 }).checked_add(1)
        }
    };
    out.flush()?;
    Ok(next)
}

/// `--follow`: poll the head a few times a second (cheap: an index lookup), print what is new,
/// until SIGINT/SIGTERM or a closed stdout.
fn follow(
    args: &Args,
    ledger: &mut Ledger,
    mut next: Option<i64>,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let stop = crate::cli::stop_flag()?;
    while !stop.load(Ordering::Relaxed) {
        if crate::cli::stdout_closed() {
            return Ok(Exit::Success);
        }
        // A PostgreSQL ledger's cache catches up with the server first (polled, as a file is).
        ledger.refresh()?;
        let head = ledger.max_id()?;
        if let Some(from) = next.filter(|n| head >= *n) {
            let filter = Filter {
                since: Some(from),
                until: Some(head),
                kinds: args
                    .kind
                    .iter()
                    .map(|k| crate::event::Kind::from(k.as_str()))
                    .collect(),
            };
            ledger.scan(&filter, &mut |ev| {
                out.event(&ev).map_err(|e| Error::io("<stdout>", e))?;
                Ok(true)
            })?;
            out.flush()?;
            next = head.checked_add(1);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(Exit::Success)
}
