//! The verify engine behind `pmm-verify` and the MCP server's `verify` tool: the chain walk,
//! the second pass for far links and repeats, the deep checker, SQLite's own check, and the
//! summary. Findings go to a sink as they are found, so a program can print them at once and
//! a server can keep the first few; nothing here touches stdout.

use crate::audit::deep::{DeepChecker, Parsed, SelfModel, KINDS_CHECKED, KINDS_NOT_CHECKED};
use crate::chain::{Anchor, Finding, Problem, Summary, Verifier};
use crate::event::{Event, Seen};
use crate::interchange::{self, Input, Item};
use crate::projection::concepts::ConceptGraph;
use crate::projection::rsm::Rsm;
use crate::Error;
use serde_json::Value;

/// What a verification checks besides the chain.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Anchors the chain must contain (id and hash).
    pub anchors: Vec<Anchor>,
    /// Recompute every derived event too.
    pub deep: bool,
    /// An input without events is clean (otherwise it is an `empty` finding).
    pub allow_empty: bool,
    /// For SQLite ledgers, SQLite's full `integrity_check` instead of `quick_check`.
    pub integrity: bool,
    /// For PostgreSQL ledgers, leave out the checks of this host's record of the ledger and
    /// of its cache (`--accept-restored-server` verifies the server alone); the head row is
    /// still checked.
    pub server_only: bool,
}

/// The self-model `--deep` checks `summary_update` snapshots against: the two folds it is
/// made of (the self-model and the concept graph its `concept_metrics` come from), folded as
/// the events go by. Each fold is independent of the others
/// ([`crate::projection::state::Projections::apply`]).
#[derive(Default)]
struct ProjectionModel {
    rsm: Rsm,
    concepts: ConceptGraph,
}

impl SelfModel for ProjectionModel {
    fn observe(&mut self, seen: &Seen<'_>) {
        self.rsm.apply(seen.ev);
        self.concepts.fold(seen);
    }
    fn expected_rsm_json(&mut self, _summary: &Event, parsed: Parsed<'_>) -> Option<Vec<u8>> {
        Some(self.rsm.snapshot_json(&self.concepts, ours(parsed)))
    }
    fn expected_rsm_state(&mut self, _summary: &Event, parsed: Parsed<'_>) -> Option<Value> {
        Some(if ours(parsed) {
            self.rsm.summary_snapshot(&self.concepts).0
        } else {
            self.rsm.snapshot(&self.concepts)
        })
    }
}

/// Whether a summary is one of our own: they keep only the newest intents and say how many
/// there were (`rsm_reflections_total` in the meta).
fn ours(parsed: Parsed<'_>) -> bool {
    parsed
        .meta
        .is_some_and(|m| m.contains_key("rsm_reflections_total"))
}

/// Verifies `input`, handing each finding to `sink` as it is found (`progress` gets the bytes
/// read), and returns the summary with its source set. A sink error stops the walk. With
/// `deep`, a ledger file's prompts are checked on a second thread during the walk
/// ([`crate::audit::prompts::spawn`]); their findings follow the walk's.
pub fn verify(
    input: &Input,
    opts: Options,
    progress: &dyn Fn(u64),
    sink: &mut dyn FnMut(Finding) -> std::io::Result<()>,
) -> crate::Result<Summary> {
    // A PostgreSQL ledger's prompts are rebuilt from this host's cache of it (caught up, every
    // link and hash checked); SQLite's own check is of a file, so it has none.
    let server = input.postgres_url().is_some();
    let deep_file = input
        .sqlite_path()
        .or(input.postgres_url().map(std::path::Path::new))
        .filter(|_| opts.deep)
        .map(|p| p.to_path_buf());
    std::thread::scope(|scope| {
        let side = deep_file.map(|path| Side {
            damage: {
                let (path, integrity) = (path.clone(), opts.integrity);
                scope.spawn(move || match server {
                    true => Ok(Vec::new()),
                    false => damage_of(&path, integrity),
                })
            },
            prompts: crate::audit::prompts::spawn(scope, path),
        });
        verify_with(input, opts, progress, sink, side)
    })
}

/// What `--deep` runs on a ledger file beside the walk, each on its own thread with its own
/// read connection: SQLite's own check and the prompt check. Their findings are reported
/// after the walk's, in that order, as when they ran after it.
struct Side<'scope> {
    damage: std::thread::ScopedJoinHandle<'scope, crate::Result<Vec<String>>>,
    prompts: crate::audit::prompts::Running<'scope>,
}

/// The side checks' findings, once the walk is done: SQLite's check's, then the prompts'
/// (whose summary is returned).
fn finish_side(
    side: Side<'_>,
    integrity: bool,
    v: &mut Verifier,
    found: &mut Vec<Finding>,
) -> crate::Result<crate::audit::prompts::PromptCounts> {
    let damage = side
        .damage
        .join()
        .map_err(|_| Error::bad_input(None, "SQLite's check's thread ended unexpectedly"))??;
    report_damage(damage, integrity, v, found);
    let first_erased = v.first_erased();
    side.prompts.finish(first_erased, &mut |id, problem| {
        v.report(Some(id), problem, found)
    })
}

/// The summary's `deep` object: the checker's counts, exactly what was recomputed and what
/// was not (and why), the prompts' counts and the checks skipped for erasures.
fn deep_summary(
    checker: DeepChecker,
    prompts: Option<crate::audit::prompts::PromptCounts>,
) -> Option<Value> {
    let skipped = checker.skipped().to_vec();
    let mut d = serde_json::to_value(checker.finish()).ok()?;
    let list = |l: &[(&str, &str)]| {
        Value::Object(
            l.iter()
                .map(|(k, why)| (k.to_string(), Value::String(why.to_string())))
                .collect(),
        )
    };
    d["kinds_checked"] = list(KINDS_CHECKED);
    d["kinds_not_checked"] = list(KINDS_NOT_CHECKED);
    if let Some(p) = prompts.and_then(|p| serde_json::to_value(p).ok()) {
        d["prompts"] = p;
    }
    if !skipped.is_empty() {
        d["skipped_for_erasure"] = serde_json::to_value(&skipped).unwrap_or_default();
    }
    Some(d)
}

/// [`verify`], with the side checks of a ledger file (if any) already running.
fn verify_with(
    input: &Input,
    opts: Options,
    progress: &dyn Fn(u64),
    sink: &mut dyn FnMut(Finding) -> std::io::Result<()>,
    mut side: Option<Side<'_>>,
) -> crate::Result<Summary> {
    let mut v = Verifier::new(opts.anchors.clone());
    // The prompt check folds the events the walk reads rather than reading them again.
    let mut feed = side.as_mut().and_then(|s| s.prompts.feed());
    let mut found: Vec<Finding> = Vec::new();
    let mut sink_err = None;
    let mut checker = opts
        .deep
        .then(|| DeepChecker::new().with_self_model(Box::new(ProjectionModel::default())));
    let mut derived: Vec<Finding> = Vec::new();
    let mut drain = |found: &mut Vec<Finding>| -> std::io::Result<()> {
        for f in found.drain(..) {
            sink(f)?;
        }
        Ok(())
    };
    let format = interchange::read_with(input, progress, &interchange::digest, &mut |item, d| {
        match (item, d) {
            (Item::Event(r), d) => {
                match d {
                    Some(d) => v.check_computed(&r.event, d, &mut found),
                    None => v.check(&r.event, r.meta.as_ref(), &mut found),
                }
                if let Some(c) = checker.as_mut() {
                    let meta = r.meta.as_ref();
                    c.check_event(&r.event, meta, v.last_erased(), &mut derived);
                    for f in derived.drain(..) {
                        v.report(f.id, f.problem, &mut found);
                    }
                }
                if let Some(feed) = feed.as_mut() {
                    feed.push(r.event);
                }
            }
            (Item::Malformed { line, id, error }, _) => v.malformed(id, line, error, &mut found),
        }
        if let Err(e) = drain(&mut found) {
            sink_err = Some(e);
            return Ok(false);
        }
        Ok(true)
    })?;
    if let Some(feed) = feed {
        feed.end();
    }
    if let Some(e) = sink_err {
        return Err(Error::io("<stdout>", e));
    }
    second_pass(input, &mut v, checker.as_mut(), &mut found)?;
    replica_findings(input, opts.server_only, &mut v, &mut found)?;
    if v.events() == 0 && !opts.allow_empty {
        v.report(
            None,
            Problem::Empty {
                error: "no events: an empty file or ledger is not a verified one (pass --allow-empty if it is expected)".into(),
            },
            &mut found,
        );
    }
    let prompts = match side {
        Some(side) => Some(finish_side(side, opts.integrity, &mut v, &mut found)?),
        // A PostgreSQL ledger (read as a SQLite one is) has no file: `replica_findings`.
        None if format == interchange::Format::Sqlite && input.postgres_url().is_none() => {
            sqlite_damage(input, opts.integrity, &mut v, &mut found)?;
            None
        }
        None => None,
    };
    let mut summary = v.finish(&mut found);
    summary.deep = checker.and_then(|c| deep_summary(c, prompts));
    drain(&mut found).map_err(|e| Error::io("<stdout>", e))?;
    summary.source = Some(input.name());
    Ok(summary)
}

/// What a PostgreSQL ledger's rows alone do not show ([`crate::store::replica::audit`]): the
/// head row, and (unless `server_only`) this host's record and cache of the ledger.
fn replica_findings(
    input: &Input,
    server_only: bool,
    v: &mut Verifier,
    found: &mut Vec<Finding>,
) -> crate::Result<()> {
    if let Some(url) = input.postgres_url() {
        for f in crate::store::replica::audit::audit(url, !server_only)? {
            v.report(f.id, f.problem, found);
        }
    }
    Ok(())
}

/// One more read, when the first left something open, settles both far-pointing links and
/// repeats (the chain) and derived events whose inputs had left the deep checker's window.
fn second_pass(
    input: &Input,
    v: &mut Verifier,
    checker: Option<&mut DeepChecker>,
    found: &mut Vec<Finding>,
) -> crate::Result<()> {
    let chain_pass = v.second_pass();
    let mut checker = checker;
    let deep_pass = checker.as_mut().and_then(|c| c.second_pass());
    if chain_pass.is_none() && deep_pass.is_none() {
        return Ok(());
    }
    let (mut chain_pass, mut deep_pass) = (chain_pass, deep_pass);
    if input.rereadable() {
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
        v.settle(p, found);
    }
    if let (Some(c), Some(p)) = (checker, deep_pass) {
        let mut derived = Vec::new();
        c.settle(p, &mut derived);
        for f in derived {
            v.report(f.id, f.problem, found);
        }
    }
    Ok(())
}

/// SQLite's own check of a ledger file (the chain walk reads the table through its rowid tree
/// only: a damaged index, or a damaged interior page that hides a subtree, passes it).
fn sqlite_damage(
    input: &Input,
    integrity: bool,
    v: &mut Verifier,
    found: &mut Vec<Finding>,
) -> crate::Result<()> {
    let Some(path) = &input.path else {
        return Ok(());
    };
    report_damage(damage_of(path, integrity)?, integrity, v, found);
    Ok(())
}

/// What SQLite's check of the ledger at `path` says is wrong (at most 100 lines).
fn damage_of(path: &std::path::Path, integrity: bool) -> crate::Result<Vec<String>> {
    let ledger = crate::store::Ledger::open_reader(path)?;
    crate::store::sqlite_check(&ledger, integrity, 100)
}

/// Reports each line of SQLite's check as a `sqlite_damage` finding.
fn report_damage(errors: Vec<String>, integrity: bool, v: &mut Verifier, found: &mut Vec<Finding>) {
    let check = if integrity {
        "integrity_check"
    } else {
        "quick_check"
    };
    for error in errors {
        let problem = Problem::SqliteDamage {
            check: check.into(),
            error,
        };
        v.report(None, problem, found);
    }
}
