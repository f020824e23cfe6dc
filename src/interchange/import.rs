//! The verified import behind `pmm-append --import`: a reference JSON export, JSONL events, a
//! `.gz` of either or another SQLite ledger, copied verbatim (ids, ts, hashes) into an empty
//! ledger or as an exact continuation of its head, in one transaction, after every event's
//! hash and link were verified. Nothing here touches stdout: the caller prints the summary.

use crate::chain::{Finding, Problem, Verifier};
use crate::interchange::{self, Input, Item};
use crate::store::{EventLog, Ledger};
use crate::Error;
use serde::Serialize;

/// What an import did: the `{"type":"import",…}` record `pmm-append --import` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportSummary {
    /// Always `import`.
    #[serde(rename = "type")]
    pub record: &'static str,
    /// The source's name (its path, or `<stdin>`).
    pub source: String,
    /// Events imported.
    pub events: u64,
    /// The first event imported.
    pub first_id: Option<i64>,
    /// The last event imported.
    pub last_id: Option<i64>,
    /// Its hash.
    pub last_hash: Option<String>,
    /// Broken links kept verbatim (with `accept_forks`).
    pub broken_links: u64,
}

/// Why a finding refuses the import, in the words `pmm-append` prints; `None` for a finding
/// that does not (a broken link inside the source with `accept_forks`, checks an import does
/// not make). `first` is true for the source's first event, `points_to` the event a broken
/// link's `prev_hash` names.
fn refusal(f: &Finding, first: bool, accept_forks: bool, points_to: Option<i64>) -> Option<String> {
    let id = f.id.unwrap_or(0);
    Some(match &f.problem {
        Problem::BrokenLink { .. } if accept_forks && !first => return None,
        Problem::BrokenLink { found, .. } if first => format!(
            "event {id} does not continue this ledger: its prev_hash is {}, not the head's hash",
            found.as_deref().unwrap_or("null")
        ),
        Problem::BrokenLink { found, .. } => format!(
            "event {id}: prev_hash {} points to {} instead of event {}: the source's chain forks; pass --accept-forks to keep it verbatim",
            found.as_deref().unwrap_or("null"),
            points_to.map_or("no earlier event".to_string(), |p| format!("event {p}")),
            id - 1
        ),
        Problem::HashMismatch { expected, found } => format!(
            "event {id}: stored hash {} is not the hash of its fields ({expected})",
            found.as_deref().unwrap_or("null")
        ),
        Problem::IdGap { expected: Some(expected) } if first => format!(
            "the source starts at event {id}, but this ledger needs event {expected} next (import into an empty ledger, or a continuation of its head)"
        ),
        Problem::IdGap { expected: Some(expected) } => format!("event {id}: expected id {expected} (ids must rise by one)"),
        Problem::IdGap { expected: None } => format!(
            "event {id}: it follows event {}, which no event can follow",
            i64::MAX
        ),
        Problem::GenesisPrevHash { found } => {
            format!("event {id} is the first event but has prev_hash {found}")
        }
        Problem::DuplicateHash { hash, first_id } => format!(
            "event {id} repeats hash {hash} of event {}",
            first_id.map_or("?".into(), |i| i.to_string())
        ),
        Problem::Malformed { line, error } => match line {
            Some(l) => format!("line {l}: {error}"),
            None => format!("event {id}: {error}"),
        },
        Problem::SqliteDamage { error, .. } => format!("the source is damaged: {error}"),
        Problem::AnchorMismatch { .. }
        | Problem::HeadMismatch { .. }
        | Problem::HistoryRewritten { .. }
        | Problem::RolledBack { .. }
        | Problem::CacheMismatch { .. }
        | Problem::DerivedMismatch { .. }
        | Problem::Erased { .. }
        | Problem::Empty { .. } => return None,
    })
}

/// Events an import appends between two catch-ups of the full-text index and the Merkle tree
/// ([`crate::store::Batch::catch_up`]).
const CATCH_UP_EVERY: u64 = 1 << 16;

/// Imports `input` into `ledger` in one transaction, verifying each event as it is read:
/// an event that does not continue the ledger's head, a wrong hash, an id out of order, a
/// malformed record, or (unless `accept_forks`) a broken link inside the source refuses the
/// whole import ([`Error::ImportRefused`]) and nothing is written. `progress` gets the bytes
/// read.
pub fn import(
    ledger: &mut Ledger,
    input: &Input,
    accept_forks: bool,
    progress: &dyn Fn(u64),
) -> crate::Result<ImportSummary> {
    import_stepped(ledger, input, accept_forks, progress, CATCH_UP_EVERY)
}

/// [`import`], catching the derived tables up every `step` events.
fn import_stepped(
    ledger: &mut Ledger,
    input: &Input,
    accept_forks: bool,
    progress: &dyn Fn(u64),
    step: u64,
) -> crate::Result<ImportSummary> {
    let name = input.name();
    let mut tx = ledger.begin()?;
    // Into an empty ledger, the hash index is built once at the end, sorted, instead of one
    // random insert per event (which, past the page cache, made a 10^7 import super-linear).
    let rebuild_index = tx.head().is_none() && tx.defer_hash_index()?;
    let mut verifier = match tx.head() {
        Some(h) => Verifier::after(h.id, h.hash.clone()),
        None => Verifier::new(vec![]),
    }
    .eager();
    let mut summary = ImportSummary {
        record: "import",
        source: name.clone(),
        events: 0,
        first_id: None,
        last_id: None,
        last_hash: None,
        broken_links: 0,
    };
    let mut findings = Vec::new();
    interchange::read_with(
        input,
        progress,
        &interchange::digest,
        &mut |item, digest| {
            findings.clear();
            let record = match item {
                Item::Event(r) => r,
                Item::Malformed { line, id, error } => {
                    verifier.malformed(id, line, error, &mut findings);
                    let msg = refusal(&findings[0], false, false, None).unwrap_or_default();
                    return Err(Error::ImportRefused(format!("{name}: {msg}")));
                }
            };
            let first = summary.events == 0;
            match digest {
                Some(d) => verifier.check_computed(&record.event, d, &mut findings),
                None => verifier.check(&record.event, record.meta.as_ref(), &mut findings),
            }
            judge(&findings, &tx, first, accept_forks, &name, &mut summary)?;
            tx.insert_verbatim(&record.event)?;
            summary.events += 1;
            if summary.events.is_multiple_of(step.max(1)) {
                tx.catch_up()?;
            }
            summary.first_id.get_or_insert(record.event.id);
            summary.last_id = Some(record.event.id);
            summary.last_hash = record.event.hash.clone();
            Ok(true)
        },
    )?;
    settle_erased(verifier, accept_forks, &name)?;
    if rebuild_index {
        tx.restore_hash_index()?;
    }
    tx.commit()?;
    Ok(summary)
}

/// Judges one event's findings: the first that refuses the import (see [`refusal`]; a broken
/// link's target is looked up in `log` when the source did not name it) ends it with
/// [`Error::ImportRefused`]; each broken link let through is counted in `summary`.
fn judge(
    findings: &[Finding],
    log: &impl EventLog,
    first: bool,
    accept_forks: bool,
    name: &str,
    summary: &mut ImportSummary,
) -> crate::Result<()> {
    for f in findings {
        let points_to = match &f.problem {
            Problem::BrokenLink {
                found: Some(h),
                points_to,
                ..
            } => match points_to {
                Some(p) => Some(*p),
                None => log.id_of_hash(h)?,
            },
            _ => None,
        };
        if let Some(msg) = refusal(f, first, accept_forks, points_to) {
            return Err(Error::ImportRefused(format!("{name}: {msg}")));
        }
        if matches!(f.problem, Problem::BrokenLink { .. }) {
            summary.broken_links += 1;
        }
    }
    Ok(())
}

/// Events in the erased form are settled at the end: erased when an erasure names them, a
/// hash mismatch (refused, [`Error::ImportRefused`]) otherwise.
fn settle_erased(verifier: Verifier, accept_forks: bool, name: &str) -> crate::Result<()> {
    let mut findings = Vec::new();
    verifier.finish(&mut findings);
    if let Some(msg) = findings
        .iter()
        .find_map(|f| refusal(f, false, accept_forks, None))
    {
        return Err(Error::ImportRefused(format!("{name}: {msg}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Clock, Event, NewEvent};
    use crate::store::Filter;
    use serde_json::Map;
    use std::path::Path;

    /// A ledger at `path` with one event per content; its events.
    fn ledger(path: &Path, contents: &[&str]) -> Vec<Event> {
        let clock = Clock::pinned("2025-11-24T00:00:00Z").unwrap();
        let mut l = Ledger::open_writer(path, 1000).unwrap();
        contents
            .iter()
            .map(|c| {
                let ev = NewEvent::new(crate::event::Kind::TestEvent, *c, Map::new()).unwrap();
                crate::session::append(&mut l, &ev, &clock).unwrap()
            })
            .collect()
    }

    /// `events` as a JSON Lines file in `dir`.
    fn jsonl(dir: &Path, name: &str, events: &[&Event]) -> Input {
        let path = dir.join(name);
        let text: String = events.iter().map(|e| e.to_jsonl() + "\n").collect();
        std::fs::write(&path, text).unwrap();
        Input::new(&path)
    }

    fn all(l: &Ledger) -> Vec<Event> {
        let mut out = Vec::new();
        l.scan(&Filter::default(), &mut |e| {
            out.push(e);
            Ok(true)
        })
        .unwrap();
        out
    }

    #[test]
    fn an_import_copies_events_verbatim_and_sums_them_up() {
        let dir = tempfile::tempdir().unwrap();
        let source = ledger(&dir.path().join("a.db"), &["one", "two", "three"]);
        let input = jsonl(dir.path(), "a.jsonl", &source.iter().collect::<Vec<_>>());
        let mut into = Ledger::open_writer(&dir.path().join("b.db"), 1000).unwrap();
        let seen = std::cell::Cell::new(0);
        let summary = import(&mut into, &input, false, &|n| seen.set(n)).unwrap();
        assert_eq!(
            summary,
            ImportSummary {
                record: "import",
                source: input.name(),
                events: 3,
                first_id: Some(1),
                last_id: Some(3),
                last_hash: source[2].hash.clone(),
                broken_links: 0,
            }
        );
        assert!(seen.get() > 0);
        assert_eq!(all(&into), source);
        assert_eq!(
            serde_json::to_value(&summary).unwrap()["type"],
            serde_json::json!("import")
        );
    }

    /// Catching the full-text index and the Merkle tree up in the middle of an import (every
    /// 3 events of 10 here, every 65,536 in use) leaves both matching the ledger at the commit.
    #[test]
    fn catch_ups_during_an_import_leave_the_index_and_the_tree_whole() {
        let dir = tempfile::tempdir().unwrap();
        let words = [
            "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        ];
        let source = ledger(&dir.path().join("a.db"), &words);
        let input = jsonl(dir.path(), "a.jsonl", &source.iter().collect::<Vec<_>>());
        let mut into = Ledger::open_writer(&dir.path().join("b.db"), 1000).unwrap();
        let summary = import_stepped(&mut into, &input, false, &|_| {}, 3).unwrap();
        assert_eq!(summary.events, 10);
        assert_eq!(all(&into), source);
        assert_eq!(into.check_derived().unwrap(), Vec::<String>::new());
        assert_eq!(into.lag(crate::store::Derived::Tree).unwrap(), Some(0));
        let tree = into.tree().unwrap();
        assert_eq!(
            (tree.size(), tree.stored_size(), tree.through()),
            (10, 10, 10)
        );
    }

    #[test]
    fn an_import_continues_the_head_or_is_refused_whole() {
        let dir = tempfile::tempdir().unwrap();
        let source = ledger(&dir.path().join("a.db"), &["one", "two", "three"]);
        let tail = jsonl(dir.path(), "tail.jsonl", &[&source[1], &source[2]]);

        // Into an empty ledger, event 2 is not where it starts.
        let mut empty = Ledger::open_writer(&dir.path().join("empty.db"), 1000).unwrap();
        let e = import(&mut empty, &tail, false, &|_| ()).unwrap_err();
        assert!(matches!(e, Error::ImportRefused(_)), "{e}");
        assert!(
            e.to_string().contains("the source starts at event 2"),
            "{e}"
        );
        assert!(all(&empty).is_empty());

        // After event 1 of the same chain, it continues it.
        let mut head = Ledger::open_writer(&dir.path().join("head.db"), 1000).unwrap();
        let first = jsonl(dir.path(), "first.jsonl", &[&source[0]]);
        import(&mut head, &first, false, &|_| ()).unwrap();
        let summary = import(&mut head, &tail, false, &|_| ()).unwrap();
        assert_eq!((summary.first_id, summary.last_id), (Some(2), Some(3)));
        assert_eq!(all(&head), source);

        // After another chain's event 1, it does not.
        let other = ledger(&dir.path().join("other.db"), &["else"]);
        let mut l = Ledger::open_writer(&dir.path().join("c.db"), 1000).unwrap();
        import(
            &mut l,
            &jsonl(dir.path(), "o.jsonl", &[&other[0]]),
            false,
            &|_| (),
        )
        .unwrap();
        let e = import(&mut l, &tail, false, &|_| ()).unwrap_err();
        assert!(e.to_string().contains("event 2 does not continue"), "{e}");
        assert_eq!(all(&l), other);
    }

    #[test]
    fn a_forked_source_is_refused_unless_forks_are_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let a = ledger(&dir.path().join("a.db"), &["one", "two"]);
        let b = ledger(&dir.path().join("b.db"), &["x", "y", "z"]);
        // Event 3 of b links to b's event 2, not to a's.
        let forked = jsonl(dir.path(), "forked.jsonl", &[&a[0], &a[1], &b[2]]);
        let mut l = Ledger::open_writer(&dir.path().join("c.db"), 1000).unwrap();
        let e = import(&mut l, &forked, false, &|_| ()).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("event 3: prev_hash")
                && text.contains("points to no earlier event instead of event 2")
                && text.contains("--accept-forks"),
            "{text}"
        );
        assert!(all(&l).is_empty());
        let summary = import(&mut l, &forked, true, &|_| ()).unwrap();
        assert_eq!((summary.events, summary.broken_links), (3, 1));
        assert_eq!(all(&l), vec![a[0].clone(), a[1].clone(), b[2].clone()]);
    }

    #[test]
    fn a_malformed_or_tampered_record_refuses_the_import() {
        let dir = tempfile::tempdir().unwrap();
        let a = ledger(&dir.path().join("a.db"), &["one", "two"]);
        let path = dir.path().join("bad.jsonl");
        std::fs::write(&path, a[0].to_jsonl() + "\nnot json\n").unwrap();
        let mut l = Ledger::open_writer(&dir.path().join("c.db"), 1000).unwrap();
        let e = import(&mut l, &Input::new(&path), false, &|_| ()).unwrap_err();
        assert!(e.to_string().contains("line 2:"), "{e}");

        let mut tampered = a[1].clone();
        tampered.content = "changed".into();
        let input = jsonl(dir.path(), "t.jsonl", &[&a[0], &tampered]);
        let e = import(&mut l, &input, false, &|_| ()).unwrap_err();
        assert!(
            e.to_string().contains("event 2: stored hash")
                && e.to_string().contains("is not the hash of its fields"),
            "{e}"
        );
        assert!(all(&l).is_empty());
    }
}
