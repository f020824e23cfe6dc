//! Supersession: which events later events correct. An event names the events it replaces in
//! `meta.supersedes`, a list of ids (no kind of its own, so a reference reader sees an
//! ordinary event with one more meta key). A concept definition's `meta.supersedes` is the
//! reference's concept id, a string: not a list, so not a correction here.
//!
//! The fold keeps, for every superseded event, the newest event that named it; following
//! those links from an event reaches the one that is believed now ([`Supersession::current`]:
//! A corrected by B corrected by C resolves to C). A fold to event N knows only the
//! corrections up to N: what was believed at N.

use crate::event::Seen;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The meta key that names the corrected events.
pub const KEY: &str = "supersedes";

/// Who corrected an event, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Correction {
    /// The correcting event.
    pub by: i64,
    /// Its time.
    pub ts: String,
    /// Its actor (`meta.source`, or `unknown`).
    pub source: String,
}

/// Every correction folded so far: superseded id → the newest event that names it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Supersession {
    by: BTreeMap<i64, Correction>,
}

/// The ids a meta's `supersedes` names, when it is a non-empty list of positive integers
/// (anything else is not a correction: a concept's string, or a malformed value that the
/// writers refuse, see [`check`]).
pub fn supersedes_of(meta: &Map<String, Value>) -> Option<Vec<i64>> {
    let list = meta.get(KEY)?.as_array()?;
    let ids: Option<Vec<i64>> = list
        .iter()
        .map(|v| v.as_i64().filter(|&id| id > 0))
        .collect();
    ids.filter(|ids| !ids.is_empty())
}

/// Why a new event's `meta.supersedes` may not be written, for an event that will get id
/// `next` (`None`: it may, or it names nothing). A concept definition's string is the
/// reference's and passes; any other value must be a non-empty list of ids of earlier
/// events, none repeated.
pub fn check(kind: &crate::event::Kind, meta: &Map<String, Value>, next: i64) -> Option<String> {
    let v = meta.get(KEY)?;
    if *kind == crate::event::Kind::ConceptDefine && v.is_string() {
        return None;
    }
    let Some(ids) = supersedes_of(meta) else {
        return Some(format!(
            "meta.{KEY} must be a non-empty list of event ids, not {v}"
        ));
    };
    let mut seen = std::collections::BTreeSet::new();
    for id in ids {
        if id >= next {
            return Some(format!(
                "meta.{KEY} names event {id}, which is not an earlier event (this one would be {next})"
            ));
        }
        if !seen.insert(id) {
            return Some(format!("meta.{KEY} names event {id} twice"));
        }
    }
    None
}

impl Supersession {
    /// Folds one event: each id its `meta.supersedes` names (earlier than it) is corrected by
    /// it.
    pub fn fold(&mut self, s: &Seen<'_>) {
        // Most events have no such key: skip the parse.
        if !s.ev.meta.contains("\"supersedes\"") {
            return;
        }
        let Some(meta) = s.meta_object() else {
            return;
        };
        let Some(ids) = supersedes_of(meta) else {
            return;
        };
        let source = meta
            .get("source")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        for id in ids.into_iter().filter(|&id| id < s.ev.id) {
            let c = Correction {
                by: s.ev.id,
                ts: s.ev.ts.clone(),
                source: source.to_string(),
            };
            self.by.insert(id, c);
        }
    }

    /// Who corrected event `id`, if anyone did.
    pub fn corrected(&self, id: i64) -> Option<&Correction> {
        self.by.get(&id)
    }

    /// The event believed now in place of `id`: `id` itself when nothing corrected it, else
    /// the end of its chain of corrections (each correction is a later event, so the chain
    /// ends).
    pub fn current(&self, id: i64) -> i64 {
        let mut at = id;
        while let Some(c) = self.by.get(&at) {
            if c.by <= at {
                break;
            }
            at = c.by;
        }
        at
    }

    /// How many events are superseded.
    pub fn len(&self) -> usize {
        self.by.len()
    }

    /// Whether no event is superseded.
    pub fn is_empty(&self) -> bool {
        self.by.is_empty()
    }

    /// Every superseded event and who corrected it, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (i64, &Correction)> {
        self.by.iter().map(|(id, c)| (*id, c))
    }

    /// The `supersession` part of the state record: how many events are superseded and, for
    /// each, who corrected it, when, and what is believed now.
    pub fn state_value(&self) -> Value {
        let list: Vec<Value> = self
            .iter()
            .map(|(id, c)| {
                serde_json::json!({
                    "id": id, "by": c.by, "source": c.source, "ts": c.ts,
                    "current": self.current(id),
                })
            })
            .collect();
        serde_json::json!({"superseded": self.len(), "corrections": list})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, Kind};
    use serde_json::json;

    fn fold(s: &mut Supersession, id: i64, meta: Value) {
        let e = Event::sample(id, "user_message", "x", &meta.to_string());
        s.fold(&Seen::new(&e));
    }

    #[test]
    fn a_chain_of_corrections_resolves_to_its_last() {
        let mut s = Supersession::default();
        fold(&mut s, 1, json!({}));
        fold(&mut s, 2, json!({"supersedes": [1], "source": "cli"}));
        fold(
            &mut s,
            3,
            json!({"supersedes": [2], "source": "mcp:laptop"}),
        );
        assert_eq!(s.current(1), 3);
        assert_eq!(s.current(2), 3);
        assert_eq!(s.current(3), 3);
        assert_eq!(s.corrected(1).map(|c| c.by), Some(2));
        assert_eq!(
            s.corrected(2).map(|c| c.source.as_str()),
            Some("mcp:laptop")
        );
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn only_lists_of_earlier_ids_correct() {
        let mut s = Supersession::default();
        fold(&mut s, 5, json!({"supersedes": "abc"}));
        fold(&mut s, 6, json!({"supersedes": [9]}));
        fold(&mut s, 7, json!({"supersedes": [1, "2"]}));
        assert!(s.is_empty());
    }

    #[test]
    fn the_check_refuses_what_is_not_a_list_of_earlier_ids() {
        let m = |v: Value| v.as_object().cloned().unwrap_or_default();
        let user = Kind::UserMessage;
        assert_eq!(check(&user, &m(json!({})), 5), None);
        assert_eq!(check(&user, &m(json!({"supersedes": [1, 4]})), 5), None);
        assert!(check(&user, &m(json!({"supersedes": [5]})), 5).is_some());
        assert!(check(&user, &m(json!({"supersedes": [1, 1]})), 5).is_some());
        assert!(check(&user, &m(json!({"supersedes": []})), 5).is_some());
        assert!(check(&user, &m(json!({"supersedes": "c1"})), 5).is_some());
        assert!(check(&user, &m(json!({"supersedes": [0]})), 5).is_some());
        let concept = Kind::ConceptDefine;
        assert_eq!(check(&concept, &m(json!({"supersedes": "c1"})), 5), None);
    }
}
