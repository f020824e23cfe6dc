//! Deep verification of the indexer (`pmm-verify --deep`): every `index` tick's events are
//! recomputed with the rule the tick names (`meta.index_rule`; rule 1 when absent) from its
//! evidence messages and the concept layer and commitments before it
//! ([`crate::projection::indexing::plan`], the function the tick writes with), and compared
//! event by event: kind, content and meta.
//!
//! A streaming fold like the rest of the deep checker: it folds the concept graph and the
//! mirror as the events go by, keeps the ids of the newest messages, and takes the messages'
//! text from the checker's window ([`super::deep`]). The events an index tick wrote are the
//! concept and claim events that follow its `autonomy_tick` (after its auto-closes), up to the
//! first event of another kind.

use crate::event::{Action, Event, Kind, Seen};
use crate::projection::concepts::ConceptGraph;
use crate::projection::indexing::{self, Message, Planned};
use crate::projection::mirror::Mirror;
use serde_json::Value;
use std::collections::VecDeque;

/// How many of the newest message ids are kept (the kernel's unindexed window).
const MESSAGE_WINDOW: usize = crate::projection::autonomy::UNINDEXED_MAX;

/// The kinds an index tick writes.
const INDEX_KINDS: [Kind; 5] = [
    Kind::ConceptDefine,
    Kind::ConceptBindAsync,
    Kind::ConceptBindThread,
    Kind::ConceptRelate,
    Kind::ClaimFromText,
];

/// What recomputing one event of an index tick found.
#[derive(Debug, PartialEq)]
pub enum IndexVerdict {
    /// Nothing to check.
    None,
    /// An index tick's event, recomputed and equal.
    Same,
    /// Recomputed and different (on the event, or on the tick when events are missing): the
    /// id to report, what, expected and found.
    Differs(i64, String, Value, Value),
    /// An index tick that cannot be recomputed: an evidence message's text is out of reach.
    Unresolved,
    /// An index tick not recomputed because an input (or one of its events) was erased: the
    /// tick and the erased event.
    Erased(i64, i64),
}

/// The events of one index tick, as recomputed, and how far the ledger's have been compared.
struct Run {
    tick: i64,
    expected: Vec<Planned>,
    next: usize,
    /// A difference was reported: the rest of the tick is not compared.
    done: bool,
}

/// The streaming check (see the module docs).
#[derive(Default)]
pub struct IndexCheck {
    concepts: ConceptGraph,
    mirror: Mirror,
    /// The newest messages' ids and kinds, oldest first, and whether the window lost older
    /// ones.
    messages: VecDeque<(i64, Kind)>,
    truncated: bool,
    run: Option<Run>,
    /// Index ticks and events recomputed.
    pub checked: u64,
}

fn planned_value(p: &Planned) -> Value {
    serde_json::json!({"kind": p.kind.as_str(), "content": p.content, "meta": p.meta})
}

impl IndexCheck {
    /// Checks `ev` (not erased) against what the index tick before it derives, then folds
    /// it in. `text` gives a message's text by id (`None`: out of reach); `erased` says
    /// whether an event was erased.
    pub fn check(
        &mut self,
        s: &Seen<'_>,
        text: &dyn Fn(i64) -> Option<String>,
        erased: &dyn Fn(i64) -> bool,
    ) -> Vec<IndexVerdict> {
        let mut out = Vec::new();
        if let Some(v) = self.compare(s) {
            out.push(v);
        }
        if s.ev.kind == Kind::AutonomyTick {
            if let Some(v) = self.start(s, text, erased) {
                out.push(v);
            }
        }
        self.fold(s);
        out
    }

    /// An erased event: one of an index tick's ends comparing that tick (its content is
    /// gone); any other ends the tick's events, as in [`IndexCheck::check`]. Folded in.
    pub fn erased(&mut self, ev: &Event) -> Vec<IndexVerdict> {
        let mut out = Vec::new();
        if let Some(run) = self.run.as_mut() {
            if INDEX_KINDS.contains(&ev.kind) {
                run.next += 1;
                if !run.done {
                    run.done = true;
                    out.push(IndexVerdict::Erased(run.tick, ev.id));
                }
            } else if ev.kind != Kind::CommitmentClose || run.next > 0 {
                out.extend(self.end());
            }
        }
        self.fold(&Seen::new(ev));
        out
    }

    fn fold(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        self.concepts.fold(s);
        self.mirror.fold(s);
        if matches!(ev.kind, Kind::UserMessage | Kind::AssistantMessage) {
            self.messages.push_back((ev.id, ev.kind.clone()));
            if self.messages.len() > MESSAGE_WINDOW {
                self.messages.pop_front();
                self.truncated = true;
            }
        }
    }

    /// The run ends: the expected events it did not find are reported on the tick.
    fn end(&mut self) -> Option<IndexVerdict> {
        let run = self.run.take()?;
        (!run.done && run.next < run.expected.len()).then(|| {
            let missing: Vec<Value> = run.expected[run.next..].iter().map(planned_value).collect();
            IndexVerdict::Differs(
                run.tick,
                "index tick: events the indexer derives are missing".into(),
                Value::Array(missing),
                Value::Null,
            )
        })
    }

    /// Compares `ev` with the next expected event of the current run, if it is one of the
    /// run's; ends the run at the first event that is not.
    fn compare(&mut self, s: &Seen<'_>) -> Option<IndexVerdict> {
        let ev = s.ev;
        let run = self.run.as_mut()?;
        if ev.kind == Kind::CommitmentClose && run.next == 0 {
            return None; // the tick's auto-closes come before the index events
        }
        if !INDEX_KINDS.contains(&ev.kind) {
            return self.end();
        }
        let i = run.next;
        run.next += 1;
        if run.done {
            return None;
        }
        let found_meta = s.meta_or_empty();
        let found = || serde_json::json!({"kind": ev.kind.as_str(), "content": ev.content, "meta": found_meta});
        let Some(want) = run.expected.get(i) else {
            run.done = true;
            let what = "index tick: an event the indexer does not derive";
            return Some(IndexVerdict::Differs(
                ev.id,
                what.into(),
                Value::Null,
                found(),
            ));
        };
        if want.kind == ev.kind && want.content == ev.content && want.meta == *found_meta {
            self.checked += 1;
            return Some(IndexVerdict::Same);
        }
        run.done = true;
        let what = format!("index tick {}: {}", run.tick, want.kind.as_str());
        Some(IndexVerdict::Differs(
            ev.id,
            what,
            planned_value(want),
            found(),
        ))
    }

    /// An `autonomy_tick`: when it is an index tick, recomputes its events.
    fn start(
        &mut self,
        s: &Seen<'_>,
        text: &dyn Fn(i64) -> Option<String>,
        erased: &dyn Fn(i64) -> bool,
    ) -> Option<IndexVerdict> {
        let ev = s.ev;
        let content: Value = serde_json::from_str(&ev.content).ok()?;
        if content.get("decision").and_then(Value::as_str) != Some(Action::Index.as_str()) {
            return None;
        }
        let meta = s.meta_or_empty();
        let rule = match meta.get("index_rule") {
            None => 1,
            Some(r) => r.as_i64()?,
        };
        let evidence: Vec<i64> = content
            .get("evidence")?
            .as_array()?
            .iter()
            .filter_map(Value::as_i64)
            .collect();
        let mut read: Vec<(i64, Kind, String)> = Vec::new();
        for &id in evidence.iter().take(indexing::BATCH) {
            if erased(id) {
                return Some(IndexVerdict::Erased(ev.id, id));
            }
            let found = self.messages.binary_search_by_key(&id, |(i, _)| *i);
            let Ok(at) = found else {
                let before_window = self.messages.front().is_none_or(|(f, _)| id < *f);
                if self.truncated && before_window {
                    return Some(IndexVerdict::Unresolved);
                }
                continue; // not a message: the indexer passes over it
            };
            match text(id) {
                Some(t) => read.push((id, self.messages[at].1.clone(), t)),
                None => return Some(IndexVerdict::Unresolved),
            }
        }
        let batch: Vec<Message<'_>> = read
            .iter()
            .map(|(id, kind, t)| Message {
                id: *id,
                kind,
                content: t,
            })
            .collect();
        let mirror = &self.mirror;
        let known = |cid: &str| mirror.open.contains_key(cid) || mirror.closed.contains_key(cid);
        let Some(expected) = indexing::plan(rule, &self.concepts, &known, &batch) else {
            return Some(IndexVerdict::Unresolved);
        };
        self.run = Some(Run {
            tick: ev.id,
            expected,
            next: 0,
            done: false,
        });
        None
    }
}
