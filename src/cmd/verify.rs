//! `pmm-verify`: verify a ledger or an export.

use crate::audit::deep::{DeepChecker, SelfModel};
use crate::chain::{Anchor, Finding, Problem, Summary, Verifier};
use crate::cli::{CommonArgs, LedgerArgs, Out, Outcome, Program};
use crate::event::Event;
use crate::interchange::{self, Input, Item};
use crate::projection::state::Projections;
use crate::Error;
use anyhow::Context;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

const AFTER_HELP: &str = "\
EXAMPLES:
  Verify the ledger (the --db one, or $PMM_DB):
    pmm-verify
  Verify an export in CI, against the anchors saved by the previous run:
    pmm-export -o ledger.json.gz && pmm-verify ledger.json.gz --anchors-from anchors.txt
    pmm-verify ledger.json.gz | tail -1 > anchors.txt      # save the summary as the next anchor
  Verify a stream:
    pmm-export --format jsonl | pmm-verify -
  Only the findings about links:
    pmm-verify ledger.json | jq -c 'select(.problem==\"broken_link\")'
  Also recompute every derived event (cids, embeddings, digests, roots, slots, snapshots):
    pmm-verify --deep | jq -c 'select(.type==\"summary\") | .deep'

OUTPUT:
  One {\"type\":\"finding\",\"id\",\"problem\",...} line per problem: hash_mismatch, broken_link
  (with points_to: the event the prev_hash really names, or null), id_gap, genesis_prev_hash,
  duplicate_hash, anchor_mismatch, malformed (with its line), empty (an input without events:
  an empty file or ledger is never a clean pass unless --allow-empty), sqlite_damage (for SQLite
  ledgers: what SQLite's quick_check, or integrity_check with --integrity, reports), and with --deep
  derived_mismatch (what, expected, found); then one {\"type\":\"summary\"} line per input with counts, last_id,
  last_hash, ok and sha256_full_digest (and with --deep, what was recomputed).

EXIT STATUS:
  0  every input verifies clean
  1  findings (an input without events is one, unless --allow-empty)
  2  an input could not be read (missing, not a ledger, truncated gzip, a line longer than
     --max-line), a bad --anchor, or an --anchors-from file that holds no anchor

ENVIRONMENT:
  PMM_DB    the ledger verified when no FILE is given (default .data/pmmdb/pmm.db)";

/// Verify a ledger or an export: every hash, every link, ids and anchors.
///
/// Recomputes the hash of every event (the canonical JSON of kind, content, meta and
/// prev_hash), checks that each prev_hash is the previous event's hash, that ids rise by one
/// from 1, that the first prev_hash is null and that no hash repeats. Reads SQLite ledgers,
/// reference JSON exports, JSON Lines and gzip of either (detected from the content), as a
/// stream: memory stays flat whatever the size.
#[derive(Debug, clap::Parser)]
#[command(name = "pmm-verify", version, after_long_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    common: CommonArgs,

    /// Files to verify (SQLite, JSON, JSONL, .gz; `-` for stdin) [default: the --db ledger]
    #[arg(value_name = "FILE")]
    files: Vec<PathBuf>,
    /// An anchor `ID:HASH` saved from an earlier run: event ID must still have HASH (repeatable)
    #[arg(long, value_name = "ID:HASH")]
    anchor: Vec<Anchor>,
    /// Read anchors from a file: a saved summary line (its last_id:last_hash), or ID:HASH
    /// lines (blank lines and # comments are skipped)
    #[arg(long, value_name = "FILE")]
    anchors_from: Option<PathBuf>,
    /// Also recompute every derived event from its inputs (commitment cids, hash64
    /// embeddings, retrieval digests, checkpoint roots, slot ids, self-model snapshots) and
    /// report each that differs as a derived_mismatch
    #[arg(long)]
    deep: bool,
    /// Accept an input without events as clean (without it, an empty file or ledger is an
    /// `empty` finding, exit 1)
    #[arg(long)]
    allow_empty: bool,
    /// For SQLite ledgers: run SQLite's full PRAGMA integrity_check (every index against its
    /// table) instead of the default quick_check (page structure and records)
    #[arg(long)]
    integrity: bool,
}

/// The self-model for `--deep`: our projections, folded alongside the check, give the
/// snapshot each `summary_update` should embed.
#[derive(Default)]
struct ProjectionModel(Projections);

impl SelfModel for ProjectionModel {
    fn observe(&mut self, ev: &Event, _meta: Option<&Map<String, Value>>) {
        self.0.apply(ev);
    }
    fn expected_rsm_state(&mut self, summary: &Event, _content: Option<&Value>) -> Option<Value> {
        // Our own summaries keep only the newest intents and say how many there were.
        let ours = summary
            .meta_map()
            .is_ok_and(|m| m.contains_key("rsm_reflections_total"));
        Some(if ours {
            self.0.rsm.summary_snapshot(&self.0.concepts).0
        } else {
            self.0.rsm_snapshot()
        })
    }
}

impl Program for Args {
    fn common(&self) -> &CommonArgs {
        &self.common
    }
}

/// Reads anchors from a saved summary or a list. A file that yields no anchor (empty, only
/// comments, an events file, `{}`, an empty ledger's summary) is bad input: a vacuous pass
/// would hide the history it was meant to pin.
pub fn read_anchors(path: &Path) -> crate::Result<Vec<Anchor>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let lines =
        crate::lines::read_all_lines(&mut std::io::BufReader::new(file), crate::lines::max_line())
            .map_err(|(n, e)| {
                let at = Some(format!("{}:{n}", path.display()));
                match crate::lines::too_long(&e) {
                    Some(t) => Error::bad_input(at, t.to_string()),
                    None => Error::io(path, e),
                }
            })?;
    let mut anchors = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let at = || Some(format!("{}:{}", path.display(), i + 1));
        let line = std::str::from_utf8(line).map_err(|_| Error::bad_input(at(), "not UTF-8"))?;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| Error::bad_input(at(), format!("not valid JSON: {e}")))?;
            if v.get("type").and_then(|t| t.as_str()) != Some("summary") {
                continue;
            }
            match (
                v.get("last_id").and_then(|x| x.as_i64()),
                v.get("last_hash").and_then(|x| x.as_str()),
            ) {
                (Some(id), Some(hash)) => anchors.push(
                    format!("{id}:{hash}")
                        .parse()
                        .map_err(|e: String| Error::bad_input(at(), e))?,
                ),
                _ => continue, // an empty ledger's summary anchors nothing
            }
        } else {
            for word in line
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|w| !w.is_empty())
            {
                anchors.push(
                    word.parse()
                        .map_err(|e: String| Error::bad_input(at(), e))?,
                );
            }
        }
    }
    if anchors.is_empty() {
        return Err(Error::bad_input(
            Some(path.display().to_string()),
            "no anchors in this file (expected a saved summary line with last_id and last_hash, or ID:HASH lines)",
        ));
    }
    Ok(anchors)
}

fn emit(findings: &mut Vec<Finding>, out: &mut Out) -> std::io::Result<()> {
    for f in findings.drain(..) {
        out.record(&f)?;
    }
    Ok(())
}

/// Verifies one input, printing findings as they are found, then its summary. With `deep`,
/// derived events are recomputed too.
pub fn verify_input(
    input: &Input,
    anchors: Vec<Anchor>,
    quiet: bool,
    deep: bool,
    allow_empty: bool,
    integrity: bool,
    out: &mut Out,
) -> anyhow::Result<Summary> {
    let size = input
        .path
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    let bar = crate::cli::progress(size, quiet, "verifying");
    let mut v = Verifier::new(anchors);
    let mut findings: Vec<Finding> = Vec::new();
    let mut io_err = None;
    let tick = |n: u64| bar.set_position(n);
    let mut checker =
        deep.then(|| DeepChecker::new().with_self_model(Box::new(ProjectionModel::default())));
    let mut derived: Vec<Finding> = Vec::new();
    let format = interchange::read_with(input, &tick, &interchange::digest, &mut |item, digest| {
        match (item, digest) {
            (Item::Event(r), d) => {
                match d {
                    Some(d) => v.check_computed(&r.event, d, &mut findings),
                    None => v.check(&r.event, r.meta.as_ref(), &mut findings),
                }
                if let Some(c) = checker.as_mut() {
                    c.check(&r.event, &mut derived);
                    for f in derived.drain(..) {
                        v.report(f.id, f.problem, &mut findings);
                    }
                }
            }
            (Item::Malformed { line, id, error }, _) => v.malformed(id, line, error, &mut findings),
        }
        if let Err(e) = emit(&mut findings, out) {
            io_err = Some(e);
            return Ok(false);
        }
        Ok(true)
    })
    .with_context(|| format!("cannot verify {}", input.name()))?;
    if let Some(e) = io_err {
        return Err(e.into());
    }
    let chain_pass = v.second_pass();
    let deep_pass = checker.as_mut().and_then(|c| c.second_pass());
    if chain_pass.is_some() || deep_pass.is_some() {
        let (mut chain_pass, mut deep_pass) = (chain_pass, deep_pass);
        if input.rereadable() {
            // One more read settles both: far-pointing links and repeats, and derived events
            // whose inputs had left the deep checker's window.
            interchange::read(input, &|_| {}, &mut |item| {
                if let Item::Event(r) = item {
                    if let Some(p) = chain_pass.as_mut() {
                        p.see(r.event.id, r.event.hash.as_deref());
                    }
                    if let Some(p) = deep_pass.as_mut() {
                        p.see(&r.event);
                    }
                }
                Ok(true)
            })?;
        }
        if let Some(p) = chain_pass {
            v.settle(p, &mut findings);
        }
        if let (Some(c), Some(p)) = (checker.as_mut(), deep_pass) {
            c.settle(p, &mut derived);
            for f in derived.drain(..) {
                v.report(f.id, f.problem, &mut findings);
            }
        }
    }
    if v.events() == 0 && !allow_empty {
        v.report(
            None,
            Problem::Empty {
                error: "no events: an empty file or ledger is not a verified one (pass --allow-empty if it is expected)".into(),
            },
            &mut findings,
        );
    }
    if format == interchange::Format::Sqlite {
        // The chain walk reads the table through its rowid tree only: a damaged index, or a
        // damaged interior page that hides a subtree, passes it. SQLite's own check does not.
        if let Some(path) = &input.path {
            let ledger = crate::store::Ledger::open_reader(path)?;
            let check = if integrity {
                "integrity_check"
            } else {
                "quick_check"
            };
            for error in crate::store::sqlite_check(&ledger, integrity, 100)? {
                let problem = crate::chain::Problem::SqliteDamage {
                    check: check.into(),
                    error,
                };
                v.report(None, problem, &mut findings);
            }
        }
    }
    let deep_counts = checker.map(|c| c.finish());
    let mut summary = v.finish(&mut findings);
    summary.deep = deep_counts
        .and_then(|c| serde_json::to_value(c).ok())
        .map(|mut d| {
            // Say exactly what was recomputed and what was not (and why), not just counts.
            use crate::audit::deep::{KINDS_CHECKED, KINDS_NOT_CHECKED};
            let list = |l: &[(&str, &str)]| {
                Value::Object(
                    l.iter()
                        .map(|(k, why)| (k.to_string(), Value::String(why.to_string())))
                        .collect(),
                )
            };
            d["kinds_checked"] = list(KINDS_CHECKED);
            d["kinds_not_checked"] = list(KINDS_NOT_CHECKED);
            d
        });
    emit(&mut findings, out)?;
    bar.finish_and_clear();
    summary.source = Some(input.name());
    out.record(&summary)?;
    out.flush()?;
    Ok(summary)
}

/// Runs `pmm-verify`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let mut anchors = args.anchor.clone();
    if let Some(path) = &args.anchors_from {
        anchors.extend(read_anchors(path)?);
    }
    let inputs: Vec<Input> = if args.files.is_empty() {
        // The --db ledger is a regular file (a FILE argument may be a pipe: <(pmm-export)).
        let db = args.ledger.path();
        if let Ok(md) = std::fs::metadata(&db) {
            if !md.is_file() && !md.is_dir() {
                return Err(crate::store::not_regular(&db, &md).into());
            }
        }
        vec![Input::new(&db)]
    } else {
        args.files.iter().map(|f| Input::new(f)).collect()
    };
    let mut out = Out::new();
    let mut ok = true;
    for input in &inputs {
        ok &= verify_input(
            input,
            anchors.clone(),
            args.common.quiet,
            args.deep,
            args.allow_empty,
            args.integrity,
            &mut out,
        )?
        .ok;
    }
    Ok(if ok {
        Outcome::Success
    } else {
        Outcome::Negative
    })
}
