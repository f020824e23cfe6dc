//! `pmm-append --erase-query/--erase-concept/--erase-source/--erase-range [--dry-run]`:
//! forgetting by subject ([`crate::session::forget`]), every selected event (and, with
//! `--with-quotes`, every quote of one) erased in one transaction, each with its own
//! `erasure` event.

use super::{print_violation, Args};
use crate::cli::{Exit, Out};
use crate::event::{self, Clock};
use crate::session::{self, forget};
use crate::store::{EventLog, Ledger};
use crate::Error;
use serde_json::json;

/// Whether `args` ask to forget by subject (or to dry-run an `--erase`).
pub(super) fn wanted(args: &Args) -> bool {
    args.erase_query.is_some()
        || args.erase_concept.is_some()
        || args.erase_source.is_some()
        || args.erase_range.is_some()
        || (args.erase.is_some() && (args.dry_run || args.receipt.is_some()))
}

/// The subjects the arguments name, checked before anything is opened.
fn subjects(args: &Args) -> Result<Vec<forget::Subject>, Error> {
    let mut out = Vec::new();
    if let (Some(text), Some(min_score)) = (&args.erase_query, args.min_score) {
        if crate::pystr::strip(text).is_empty() {
            return Err(Error::bad_input(
                Some("--erase-query".into()),
                "the text is empty",
            ));
        }
        if !min_score.is_finite() {
            return Err(Error::bad_input(Some("--min-score".into()), "not a number"));
        }
        let text = text.clone();
        out.push(forget::Subject::Query { text, min_score });
    }
    if let Some(t) = &args.erase_concept {
        out.push(forget::Subject::Concept(t.trim().to_string()));
    }
    if let Some(a) = &args.erase_source {
        out.push(forget::Subject::Source(a.clone()));
    }
    if let Some(r) = &args.erase_range {
        let (from, to) = forget::parse_range(r)
            .map_err(|e| Error::bad_input(Some("--erase-range".into()), e))?;
        out.push(forget::Subject::Range { from, to });
    }
    Ok(out)
}

/// One event that a dry run would erase: `why` names the subject, or `quote_of:ID`; a quote
/// goes only `with_quotes`.
fn would_erase(ev: &event::Event, why: &str, goes: bool) -> serde_json::Value {
    json!({"type": "would_erase", "id": ev.id, "ts": ev.ts, "kind": ev.kind,
           "content": ev.content, "why": why, "erased": goes})
}

/// Forgets the selection: checks, selects, then erases (or prints, `--dry-run`).
pub(super) fn run(args: &Args, out: &mut Out) -> anyhow::Result<Exit> {
    let mut subjects = subjects(args)?;
    let reason = args.reason.as_deref().unwrap_or_default();
    if !args.dry_run && crate::pystr::strip(reason).is_empty() {
        return Err(Error::bad_input(Some("--reason".into()), "the reason is empty").into());
    }
    let path = args.ledger.path();
    if !crate::store::exists(&path) {
        return Err(Error::MissingLedger(path).into());
    }
    let receipt = match (&args.receipt, &args.key) {
        (Some(file), Some(key)) => Some(super::receipt::Receipt::start(file, key, &path)?),
        _ => None,
    };
    let mut ledger = match args.dry_run {
        true => Ledger::open_reader(&path)?,
        false => Ledger::open_writer(&path, args.write.busy_timeout)?,
    };
    let mut selected = match args.erase {
        // `--erase ID --dry-run`: the one event, checked as the erasure would check it.
        Some(id) => {
            subjects.clear();
            erase_one(&ledger, id)?
        }
        None => {
            let needs_state = subjects.iter().any(|s| {
                matches!(
                    s,
                    forget::Subject::Query { .. } | forget::Subject::Concept(_)
                )
            });
            let p = match needs_state {
                true => crate::projection::checkpoint::project(&ledger, None, true)?.projections,
                false => Default::default(),
            };
            ledger.in_snapshot(|l| forget::select(l, &p, &subjects))?
        }
    };
    let quotes = forget::quotes(&ledger, &selected)?;
    if args.dry_run {
        return dry_run(&ledger, &selected, &quotes, args.with_quotes, out);
    }
    let quoted: Vec<i64> = quotes.values().flatten().copied().collect();
    if args.with_quotes {
        for q in &quoted {
            selected.entry(*q).or_insert_with(|| "quote".into());
        }
    }
    let targets: Vec<i64> = selected.keys().copied().collect();
    let mut quoted_by: Vec<i64> = if args.with_quotes { vec![] } else { quoted };
    quoted_by.sort_unstable();
    quoted_by.dedup();
    let clock = args.clock.clock();
    let erased = erase_all(args, &mut ledger, &targets, quoted_by, reason, &clock, out)?;
    if let Some(r) = receipt {
        r.finish(&ledger, &erased)?;
    }
    Ok(Exit::Success)
}

/// `--erase ID` as a selection of one, refused as the erasure would refuse it.
fn erase_one(ledger: &Ledger, id: i64) -> anyhow::Result<forget::Selection> {
    let bad = |msg: String| Error::bad_input(Some("--erase".into()), msg);
    match ledger.get(id)? {
        None => Err(bad(format!("no event {id}")).into()),
        Some(e) if e.kind == event::Kind::Erasure => {
            Err(bad(format!("event {id} is an erasure: erasures are not erased")).into())
        }
        Some(_) => match ledger.erased_by(id)? {
            Some(by) => Err(bad(format!("event {id} is already erased (by event {by})")).into()),
            None => Ok([(id, "id".to_string())].into_iter().collect()),
        },
    }
}

/// Prints what would go, writes nothing: each selected event, each quote (with whether
/// `--with-quotes` is given), then `{"type":"erasure","dry_run":true,"erased","quoted_by"}`.
fn dry_run(
    ledger: &Ledger,
    selected: &forget::Selection,
    quotes: &std::collections::BTreeMap<i64, Vec<i64>>,
    with_quotes: bool,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let mut erased: Vec<i64> = selected.keys().copied().collect();
    for (&id, why) in selected {
        if let Some(ev) = ledger.get(id)? {
            out.record(&would_erase(&ev, why, true))?;
        }
    }
    let mut quoted_by = Vec::new();
    for (of, list) in quotes {
        for &q in list {
            if let Some(ev) = ledger.get(q)? {
                out.record(&would_erase(&ev, &format!("quote_of:{of}"), with_quotes))?;
            }
            quoted_by.push(q);
        }
    }
    quoted_by.sort_unstable();
    quoted_by.dedup();
    if with_quotes {
        erased.append(&mut quoted_by);
        erased.sort_unstable();
        erased.dedup();
    }
    out.record(
        &json!({"type": "erasure", "dry_run": true, "erased": erased,
                        "quoted_by": quoted_by}),
    )?;
    out.flush()?;
    Ok(Exit::Success)
}

/// Erases `targets` in one transaction ([`session::erase`]) and prints the erasure events
/// and the `{"type":"erasure"}` record; the erasure events.
fn erase_all(
    args: &Args,
    ledger: &mut Ledger,
    targets: &[i64],
    quoted_by: Vec<i64>,
    reason: &str,
    clock: &Clock,
    out: &mut Out,
) -> anyhow::Result<Vec<event::Event>> {
    let erased = match targets.is_empty() {
        true => crate::store::Erased {
            events: vec![],
            erased: vec![],
            wal_truncated: true,
        },
        // `targets` holds the quotes already (the selection's, as --dry-run lists them).
        false => match session::erase(ledger, targets, false, reason, &args.source, clock) {
            Ok(e) => e,
            Err(e) => {
                let e = anyhow::Error::new(e);
                print_violation(ledger, &e, out)?;
                return Err(e);
            }
        },
    };
    for ev in &erased.events {
        out.event(ev)?;
    }
    out.record(
        &json!({"type": "erasure", "erased": targets, "quoted_by": quoted_by,
                        "wal_truncated": erased.wal_truncated}),
    )?;
    out.flush()?;
    Ok(erased.events)
}
