//! `pmm-tick`: one autonomy tick per run, or a supervisor loop (`--every`).

use crate::cli::adapter::AdapterArgs;
use crate::cli::{self, ClockArgs, CommonArgs, Exit, LedgerArgs, Out, Program, WriteArgs};
use crate::event::config::Threshold;
use crate::kernel::think::{self, Thought, BUDGET_KEYS};
use crate::kernel::tick::{self, Ticked};
use crate::kernel::Slot;
use crate::llm::{Adapter, Cancel};
use crate::session::{Options, TurnError};
use crate::store::log::SessionWriter;
use crate::store::Ledger;
use crate::Error;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const AFTER_HELP: &str = "\
EXAMPLES:
  One tick now (what cron runs); a second run in the same 10-second slot does nothing:
    pmm-tick --db agent.db
  What would the kernel do? (writes nothing):
    pmm-tick --db agent.db --dry-run | jq .
  Run as a supervisor, one tick a minute, until SIGINT/SIGTERM:
    pmm-tick --db agent.db --every 1m --interval 60
  Reflect more often; the change is an event, so replay and later ticks see it:
    pmm-tick --db agent.db --set reflection_interval=5 --set summary_interval=40
  Reproducible ticks (tests, demos): a pinned clock and explicit slots:
    for s in 1 2 3; do pmm-tick --db agent.db --now 2025-11-24T06:00:00Z --slot $s; done
  Watch the kernel's reasoning:
    pmm-tick --every 10s | jq -c 'select(.kind==\"autonomy_tick\") | .content | fromjson'
  Thinking ticks: a tick that reflects or reviews a commitment asks the model what to do
  (its COMMIT/CLOSE/CLAIM/REFLECT lines are applied as a turn's are), once per slot:
    pmm-tick --db agent.db --adapter ollama --model llama3.2
  The same from cron, every 10 minutes, at most 12 model calls and 50000 tokens a UTC day:
    pmm-tick --db agent.db --set think_calls_per_day=12 --set think_tokens_per_day=50000
    */10 * * * * PMM_ADAPTER=ollama pmm-tick --db agent.db --interval 600

RULES (in order; see docs/autonomy.md):
  1. no metrics_turn yet                                     -> idle
  2. no kernel reflection since the latest metrics_turn       -> reflect
  3. events since the last kernel reflection >= reflection_interval (10) -> reflect
  4. events since the last summary >= summary_interval (50),
     with a kernel reflection since it                        -> summarize
  5. an open commitment with >= commitment_staleness (20) events since it -> reflect (review)
  6. otherwise                                                -> idle
  A reflect with nothing new to say (nothing changed, same stalled commitments) is an idle.
  With --adapter (or PMM_ADAPTER), a reflect asks the model (a thinking tick; see
  docs/autonomy.md): the slot's stimulus is written first (the claim: a second tick of the
  slot writes nothing and asks nothing), the model is called with no lock held, then the
  tick is written with the reply (meta.source autonomy_kernel) and what its markers did.
  Past the day's budget (think_calls_per_day 48, think_tokens_per_day 200000 unless set)
  the tick is today's, and its autonomy_tick says why in meta.think.
  When more than one commitment is open, those older than commitment_auto_close (27) events
  are closed, stalest first; the newest open commitment always stays.

OUTPUT:
  The events the tick appended as JSON Lines, then
  {\"type\":\"tick\",\"slot\",\"slot_id\",\"decision\",\"reasoning\",\"evidence\",\"auto_closed\",\"events\",\"first_id\",\"last_id\",\"rows_read\"}
  and, with an adapter, \"think\": {\"asked\":true,\"provider\",\"model\",\"reply\",\"opened\",\"closed\",
  \"claims\",\"prompt_sha256\"} or {\"asked\":false,\"why\"}
  (a slot that was already ticked: \"decision\":null and \"skipped\"). --dry-run prints one
  {\"type\":\"decision\",…} object; --set prints the config and
  autonomy_rule_table events it appended, then {\"type\":\"thresholds\",…}.

EXIT STATUS:
  0  ticked, or the slot already had its tick, or --every ended on SIGINT/SIGTERM; an
     embedding step that fails after the tick (server down, model changed) is a warning on
     stderr, and the next tick tries again
  1  the ledger's write policy forbade one of the tick's (or --set's) events: nothing of it
     was written, a violation event records the refusal
  2  bad input (a bad --set, --slot or duration, a bad adapter setup), a locked or
     unreadable ledger
  3  a thinking tick's model cannot be asked (found before anything is written), or it
     failed (an error status, a dropped connection, no answer within --timeout): the slot's
     stimulus and a generation_failure naming the slot are in the ledger, nothing else of
     the tick; the slot is spent and the next slot decides afresh
  130, 143  SIGINT or SIGTERM during a thinking tick's model call (a generation_failure
     with reason interrupted, as for 3)

ENVIRONMENT:
  PMM_DB   the ledger when --db is not given (default .data/pmmdb/pmm.db)
  PMM_NOW  pin the clock (RFC 3339): the slot, every timestamp and the budget's UTC day
           come from it
  PMM_ADAPTER, PMM_MODEL, OLLAMA_HOST, OPENAI_BASE_URL, OPENAI_API_KEY
           the model of thinking ticks, as for pmm-turn (no adapter: no model is asked)
  PMM_EMBED_PROVIDER, PMM_EMBED_MODEL, PMM_EMBED_URL, PMM_EMBED_API_KEY
           an embedding model: after each tick, up to 64 events without a vector are
           embedded (semantic recall; see pmm-recall --help)
  A .env file in the current directory is read for variables that are not set.";

/// Run the autonomy kernel: one tick per run, for cron, or a supervisor loop with --every.
///
/// A tick belongs to a slot (whole intervals of 10 s since 2025-11-01T00:00:00Z). The kernel
/// decides — idle, reflect or summarize — from the ledger alone, inside the write transaction,
/// and the tick's events (stimulus, tick, closes, reflection or summary, metrics every 10th
/// tick, checkpoint manifests) are written together or not at all. A slot that already has a
/// stimulus is left alone, so cron may fire twice. Thresholds live in the ledger (--set).
#[derive(Debug, clap::Parser)]
#[command(name = "pmm-tick", version, after_long_help = AFTER_HELP)]
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
    #[command(flatten)]
    llm: AdapterArgs,

    /// Tick this slot instead of the clock's
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(0..))]
    slot: Option<i64>,
    /// Slot length in seconds
    #[arg(long, value_name = "SECS", default_value_t = 10, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(1..))]
    interval: i64,
    /// Run as a supervisor: a tick every DURATION (10s, 1m, 1h30m; a bare number is seconds;
    /// at most 366 days)
    /// until SIGINT or SIGTERM, which end it after the current tick with exit 0
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true, value_parser = crate::cli::duration::parse, conflicts_with_all = ["slot", "dry_run", "set"])]
    every: Option<Duration>,
    /// Print the decision as JSON and write nothing
    #[arg(long)]
    dry_run: bool,
    /// Set a threshold (reflection_interval, summary_interval, commitment_staleness,
    /// commitment_auto_close, index_threshold) to a positive integer; repeatable; no tick is run. A value set
    /// this way wins over learning (policy_update, meta_policy_update) until --unset. The
    /// thinking ticks' daily budget is set the same way (think_calls_per_day,
    /// think_tokens_per_day)
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_set, conflicts_with_all = ["slot", "dry_run"])]
    set: Vec<(String, i64)>,
    /// After every tick, sign a checkpoint of the ledger's Merkle tree with this private key
    /// (pmm-export --keygen writes one) into --checkpoint-out
    #[arg(long, value_name = "FILE", requires = "checkpoint_out", conflicts_with_all = ["dry_run", "set", "unset"])]
    checkpoint_key: Option<std::path::PathBuf>,
    /// The file the signed checkpoint is written to after every tick (beside it, then renamed
    /// into place; never the ledger), as pmm-export --checkpoint prints it
    #[arg(long, value_name = "FILE", requires = "checkpoint_key")]
    checkpoint_out: Option<std::path::PathBuf>,
    /// Hand a threshold set with --set back to learning (its value stays until learning
    /// moves it); repeatable; no tick is run
    #[arg(long, value_name = "KEY", value_parser = parse_unset, conflicts_with_all = ["slot", "dry_run", "every"])]
    unset: Vec<String>,
}

/// The names `--set` and `--unset` take: every [`Threshold`], then the thinking ticks' daily
/// budget ([`BUDGET_KEYS`]).
pub fn keys() -> impl Iterator<Item = &'static str> {
    Threshold::ALL.iter().map(|k| k.as_str()).chain(BUDGET_KEYS)
}

/// Why a `--set` value is refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub(crate) enum BadValue {
    /// `--set` without `=`.
    #[error("'{0}' is not KEY=VALUE")]
    NotKeyValue(String),
    /// `--set` of a key that is not a threshold.
    #[error("unknown threshold '{0}' ({keys})", keys = keys().collect::<Vec<_>>().join(", "))]
    UnknownThreshold(String),
    /// `--set` of a value that is not an integer.
    #[error("{key}: '{value}' is not an integer")]
    NotAnInteger {
        /// The threshold.
        key: String,
        /// The value given.
        value: String,
    },
    /// `--set` of a value outside 1 to 10⁹.
    #[error("{key}: {value} is out of range (1 to 1000000000)")]
    OutOfRange {
        /// The threshold.
        key: String,
        /// The value given.
        value: i64,
    },
}

fn parse_set(s: &str) -> Result<(String, i64), BadValue> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| BadValue::NotKeyValue(s.to_string()))?;
    let k = k.trim();
    if !keys().any(|key| key == k) {
        return Err(BadValue::UnknownThreshold(k.to_string()));
    }
    let n: i64 = v.trim().parse().map_err(|_| BadValue::NotAnInteger {
        key: k.to_string(),
        value: v.to_string(),
    })?;
    if !(1..=1_000_000_000).contains(&n) {
        return Err(BadValue::OutOfRange {
            key: k.to_string(),
            value: n,
        });
    }
    Ok((k.to_string(), n))
}

fn parse_unset(s: &str) -> Result<String, BadValue> {
    let k = s.trim();
    if !keys().any(|key| key == k) {
        return Err(BadValue::UnknownThreshold(k.to_string()));
    }
    Ok(k.to_string())
}

impl Program for Args {
    fn common(&self) -> &CommonArgs {
        &self.common
    }
}

fn print(out: &mut Out, t: &Ticked) -> std::io::Result<()> {
    if let Ticked::Done(o) = t {
        for e in &o.events {
            out.event(e)?;
        }
    }
    out.record(&t.record())?;
    out.flush()
}

/// `--dry-run`: the decision for `slot` as JSON, nothing written.
fn dry_run(path: &std::path::Path, slot: &Slot, out: &mut Out) -> anyhow::Result<Exit> {
    if !crate::store::exists(path) {
        return Err(Error::bad_input(
            Some(path.display().to_string()),
            "no such ledger (a dry run creates nothing)",
        )
        .into());
    }
    let ledger = Ledger::open_reader(path)?;
    let (d, already) = tick::dry_run(&ledger, slot)?;
    let mut v = serde_json::to_value(&d)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("type".into(), "decision".into());
        o.insert("slot".into(), slot.slot.into());
        o.insert("slot_id".into(), slot.slot_id.clone().into());
        o.insert("already_ticked".into(), json!(already));
    }
    out.record(&v)?;
    out.flush()?;
    Ok(Exit::Success)
}

/// `--set`/`--unset`: the events written, then the thresholds and budget in force.
fn set_step<W: SessionWriter>(
    args: &Args,
    ledger: &mut W,
    clock: &crate::event::Clock,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let (th, events) = tick::set_thresholds(ledger, &args.set, &args.unset, clock)?;
    let budget =
        think::budget(&crate::projection::checkpoint::project(&*ledger, None, true)?.projections);
    for e in &events {
        out.event(e)?;
    }
    let mut record = th.values();
    record.insert("type".into(), "thresholds".into());
    record.insert("changed".into(), json!(!events.is_empty()));
    record.insert(BUDGET_KEYS[0].into(), json!(budget.calls_per_day));
    record.insert(BUDGET_KEYS[1].into(), json!(budget.tokens_per_day));
    record.insert("set_by".into(), json!(th.set_by));
    record.insert("pinned".into(), json!(th.pinned));
    out.record(&Value::Object(record))?;
    out.flush()?;
    Ok(Exit::Success)
}

/// Runs `pmm-tick`.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    let path = args.ledger.path();
    let clock = args.clock.clock();
    let mut out = Out::new();
    let slot_now = || match args.slot {
        Some(n) => Slot::new(n, args.interval),
        None => Slot::at(clock.now(), args.interval),
    };

    if args.dry_run {
        return dry_run(&path, &slot_now(), &mut out);
    }

    let signer = checkpoint_signer(&args, &path)?;
    // A bad adapter setup (no --script, a URL that is not one) is refused before the ledger
    // is opened or created.
    let mut thinker = Thinker::new(&args)?;
    let mut ledger = crate::cli::open_writer(&path, args.write.busy_timeout, args.common.quiet)?;
    if !args.set.is_empty() || !args.unset.is_empty() {
        return set_step(&args, &mut ledger, &clock, &mut out);
    }

    let embedder = args.embed.open(&ledger)?;
    let Some(every) = args.every else {
        let t = thinker.tick(&mut ledger, &slot_now(), &mut out, true)?;
        print_tick(&mut out, &t)?;
        embed_step(&mut ledger, embedder.as_ref(), &mut out)?;
        sign_step(&ledger, signer.as_ref(), &mut out)?;
        return Ok(Exit::Success);
    };

    // The supervisor: a tick, then a sleep that a signal cuts short. A signal during a tick
    // lets it finish (it only sets the flag), so no tick is ever partial.
    let stop = cli::stop_flag()?;
    let mut ticked_once = false;
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        match thinker.tick(&mut ledger, &slot_now(), &mut out, false) {
            Ok(t) => {
                print_tick(&mut out, &t)?;
                embed_step(&mut ledger, embedder.as_ref(), &mut out)?;
                sign_step(&ledger, signer.as_ref(), &mut out)?;
                ticked_once = true;
            }
            // The first tick failing means a bad setup: stop. Later failures (a ledger
            // locked for longer than --busy-timeout) are reported and the loop goes on.
            Err(e) if !ticked_once => return Err(e),
            Err(e) => eprintln!("pmm-tick: warning: tick skipped: {e}"),
        }
        while !stop.load(Ordering::SeqCst) && started.elapsed() < every {
            if cli::stdout_closed() {
                return Ok(Exit::Success);
            }
            let left = every.saturating_sub(started.elapsed());
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }
    Ok(Exit::Success)
}

/// A tick's result: today's tick, or a thinking tick's.
enum AnyTick {
    Plain(Ticked),
    Thought(Thought),
}

fn print_tick(out: &mut Out, t: &AnyTick) -> std::io::Result<()> {
    match t {
        AnyTick::Plain(t) => print(out, t),
        AnyTick::Thought(t) => {
            if let Ticked::Done(o) = &t.ticked {
                for e in &o.events {
                    out.event(e)?;
                }
            }
            out.record(&t.record())?;
            out.flush()
        }
    }
}

/// The model a tick may ask (`--adapter`, `PMM_ADAPTER`): none, and ticks are what they
/// always were.
struct Thinker {
    adapter: Option<Box<dyn Adapter>>,
    opts: Options,
}

impl Thinker {
    fn new(args: &Args) -> anyhow::Result<Thinker> {
        let adapter = match args.llm.adapter {
            None => None,
            Some(_) => Some(AdapterArgs::build(&args.llm.config("")?)?),
        };
        let l = &args.llm;
        Ok(Thinker {
            adapter,
            opts: Options {
                temperature: l.temperature,
                top_p: l.top_p,
                seed: l.seed,
                max_tokens: l.max_tokens,
                clock: args.clock.clock(),
                ..Options::default()
            },
        })
    }

    /// One tick of `slot`. `signals`: SIGINT and SIGTERM cancel the model call (a
    /// generation_failure, exit 130 or 143); the supervisor handles them itself. A failed
    /// call prints the events it left before its error is returned.
    fn tick<W: SessionWriter>(
        &mut self,
        ledger: &mut W,
        slot: &Slot,
        out: &mut Out,
        signals: bool,
    ) -> anyhow::Result<AnyTick> {
        let Some(adapter) = self.adapter.as_mut() else {
            return Ok(AnyTick::Plain(tick::run(ledger, slot, &self.opts.clock)?));
        };
        let cancel = Cancel::new();
        if signals {
            cancel.on_signals()?;
        }
        let opts = Options {
            cancel: Some(cancel.clone()),
            ..self.opts.clone()
        };
        let result = {
            let _armed = signals.then(|| cancel.arm());
            think::run(ledger, adapter.as_mut(), slot, &opts)
        };
        match result {
            Ok(t) => Ok(AnyTick::Thought(t)),
            Err(TurnError::Generation {
                error,
                events,
                failure,
            }) => {
                for e in &events {
                    out.event(e)?;
                }
                out.flush()?;
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

/// `--checkpoint-key K --checkpoint-out F`: the key, read before anything is written, and
/// where its checkpoints go (refused when that is the ledger or one of its files).
fn checkpoint_signer(
    args: &Args,
    ledger: &std::path::Path,
) -> anyhow::Result<Option<(crate::chain::note::SignerKey, std::path::PathBuf)>> {
    let (Some(key), Some(target)) = (&args.checkpoint_key, &args.checkpoint_out) else {
        return Ok(None);
    };
    let text = crate::cli::read_small_file(key)?;
    let signer = crate::chain::note::SignerKey::parse(&text)
        .map_err(|e| Error::bad_input(Some(key.display().to_string()), e.to_string()))?;
    crate::outfile::check_not_ledger(target, ledger)?;
    Ok(Some((signer, target.clone())))
}

/// After a tick: the signed checkpoint of the ledger's tree, written beside `--checkpoint-out`
/// and renamed into place, and a `{"type":"checkpoint","size","out"}` record.
fn sign_step(
    ledger: &Ledger,
    signer: Option<&(crate::chain::note::SignerKey, std::path::PathBuf)>,
    out: &mut Out,
) -> anyhow::Result<()> {
    let Some((key, target)) = signer else {
        return Ok(());
    };
    let (note, size) = crate::audit::prove::signed_checkpoint(ledger, key)?;
    let file = crate::outfile::OutputFile::create(target, Some(ledger.path()))?;
    let mut w = file.writer()?;
    std::io::Write::write_all(&mut w, note.as_bytes()).map_err(|e| Error::io(target, e))?;
    std::io::Write::flush(&mut w).map_err(|e| Error::io(target, e))?;
    drop(w);
    file.commit()?;
    out.record(&json!({"type": "checkpoint", "size": size, "out": target.display().to_string()}))?;
    out.flush()?;
    Ok(())
}

/// After a tick, with an embedding model: one bounded batch of events that have no vector
/// yet, embedded outside the tick's transaction. Prints `{"type":"embed","model","embedded"}`
/// when it embedded something. The tick is already written, so nothing that goes wrong here
/// (a server that is down, a model whose dimensions differ from its stored vectors, a ledger
/// locked by another writer) changes the exit status: it is a warning on stderr, which cron
/// mails, and the next tick tries again.
fn embed_step<W: SessionWriter>(
    ledger: &mut W,
    embedder: Option<&crate::llm::embed::Shared>,
    out: &mut Out,
) -> anyhow::Result<()> {
    let Some(e) = embedder else {
        return Ok(());
    };
    match crate::recall::vectors::backfill_step(ledger, e) {
        Ok(0) => Ok(()),
        Ok(n) => {
            out.record(&json!({"type": "embed", "model": e.id(), "embedded": n}))?;
            out.flush()?;
            Ok(())
        }
        Err(err) => {
            eprintln!("pmm-tick: warning: the tick is written, its embedding step failed: {err}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--set`'s help spells the keys out; the table of thresholds is what `--set` takes.
    #[test]
    fn the_help_of_set_names_every_key() {
        use clap::CommandFactory;
        let cmd = Args::command();
        let set = cmd.get_arguments().find(|a| a.get_id() == "set").unwrap();
        let help = set.get_long_help().or(set.get_help()).unwrap().to_string();
        for key in keys() {
            assert!(
                help.contains(key),
                "--set's help does not name {key}: {help}"
            );
        }
    }

    #[test]
    fn set_takes_known_keys_and_positive_integers() {
        assert_eq!(
            parse_set("reflection_interval=5"),
            Ok(("reflection_interval".into(), 5))
        );
        assert_eq!(
            parse_set(" summary_interval = 40 ").unwrap().1,
            40,
            "spaces are forgiven"
        );
        for bad in [
            "reflection_interval",
            "x=1",
            "summary_interval=0",
            "commitment_staleness=-3",
            "commitment_auto_close=ten",
        ] {
            assert!(parse_set(bad).is_err(), "{bad}");
        }
    }
}
