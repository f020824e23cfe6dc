//! The concept graph (FORMATS.md §14.2): concept definitions, aliases, event and thread bindings
//! and typed relations between concepts, folded from the `concept_*` and `identity_adoption`
//! events in id order. Its metrics (§14.4) feed the self-model snapshot ([`super::rsm`]).
//!
//! Memory grows with concept activity only (definitions, aliases, bindings, relations), never
//! with the number of events in the ledger: events of other kinds leave no trace but
//! `last_event_id`. The whole state is serde-serialisable so a checkpoint can store it and a
//! restored fold continues exactly as a full one.
//!
//! Differences from the reference, all on input the reference itself cannot digest and no ledger
//! contains (documented rather than emulated):
//! - JSON text is parsed with `serde_json`, which rejects `NaN`/`Infinity` and lone surrogate
//!   escapes that CPython's `json.loads` accepts; such an event is skipped as unparsable.
//! - Tokens, aliases, cids and relation names that are not JSON strings are ignored. The
//!   reference would store numbers as dictionary keys (and later fail to sort them, or crash on
//!   lists as unhashable keys); we skip them instead.
//! - An integer `event_id` must fit in `i64`; `true`/`false` count as 1/0 because Python's
//!   `isinstance(True, int)` holds.

use crate::event::{Event, Kind, Seen};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The event id the reference stores for a thread (cid) binding's relation, which has no event.
pub const THREAD_BINDING_EVENT_ID: i64 = -1;

/// How many tokens `hot_concepts` lists (concept_metrics.py).
const HOT_CONCEPTS: usize = 5;

/// A concept with fewer bindings than this is a gap (concept_metrics.py).
const GAP_BELOW: usize = 2;

/// One version of a concept's definition, as a `concept_define` event stated it. Kept per token
/// so the history of a concept survives redefinition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConceptDefinition {
    /// The defined token, exactly as written (definitions are not alias-resolved).
    pub token: String,
    /// `concept_kind` (`""` when absent or not a string).
    pub concept_kind: String,
    /// `definition` (`""` when absent or not a string).
    pub definition: String,
    /// `attributes` as written (`{}` when absent).
    pub attributes: Value,
    /// `version` as written (`1` when absent); the reference never validates it.
    pub version: Value,
    /// `meta.concept_id` (`""` when absent).
    pub concept_id: String,
    /// The `concept_define` event that stated this version.
    pub event_id: i64,
    /// `meta.supersedes`, when present and non-empty.
    pub supersedes: Option<String>,
}

/// The concept graph as a pure fold over events in id order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConceptGraph {
    /// Last folded id; events at or below it are ignored, as the reference's `sync` does.
    last_event_id: i64,
    /// The current definition per defined token. Older versions are not kept: nothing in the
    /// state or the self-model reads them, and a ledger that redefines its concepts often
    /// (the reference ledger re-seeds all 41 five times) would grow every checkpoint.
    definitions: BTreeMap<String, ConceptDefinition>,
    /// How many definitions each token has had.
    versions: BTreeMap<String, u64>,
    /// `concept_kind` per token: from definitions, or `identity` for adopted identities.
    kinds: BTreeMap<String, String>,
    /// alias → target; chains are followed at use time.
    aliases: BTreeMap<String, String>,
    /// `(from, to, relation)`, alias-resolved when the relation was folded.
    edges: BTreeSet<(String, String, String)>,
    /// concept → bound event ids.
    concept_events: BTreeMap<String, BTreeSet<i64>>,
    /// event id → bound concepts.
    event_concepts: BTreeMap<i64, BTreeSet<String>>,
    /// concept → relation → event ids (thread bindings under [`THREAD_BINDING_EVENT_ID`]).
    relations: BTreeMap<String, BTreeMap<String, BTreeSet<i64>>>,
    /// concept → bound commitment cids.
    concept_cids: BTreeMap<String, BTreeSet<String>>,
    /// commitment cid → bound concepts.
    cid_concepts: BTreeMap<String, BTreeSet<String>>,
    /// The first event whose content the reference cannot process (valid JSON that is not an
    /// object, so `data.get` raises). The reference's graph rebuild then fails and every later
    /// RSM snapshot carries `concept_metrics: {}`; we record it and do the same.
    broken_by: Option<i64>,
}

/// Content that is JSON but not an object: the reference's `data.get` raises on it, and its
/// concept graph stops there (see `broken_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("concept event content is JSON but not an object")]
struct NotAnObject;

/// Parses `content` as the reference does with `json.loads` followed by `data.get`: `Ok(None)`
/// when it is not JSON (the reference returns quietly), [`NotAnObject`] when it is JSON but
/// not an object (the reference raises).
fn parse_object(content: &str) -> Result<Option<Map<String, Value>>, NotAnObject> {
    match serde_json::from_str::<Value>(content) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(_) => Err(NotAnObject),
        Err(_) => Ok(None),
    }
}

/// [`parse_object`], reading empty content as `{}` (as the identity and thread handlers of
/// the reference do).
fn parse_object_or_empty(content: &str) -> Result<Option<Map<String, Value>>, NotAnObject> {
    parse_object(if content.is_empty() { "{}" } else { content })
}

/// Python truthiness of an optional JSON value, for the reference's `if not x` checks (an
/// absent key is falsy): [`crate::pystr::truthy`].
fn truthy(v: Option<&Value>) -> bool {
    v.is_some_and(crate::pystr::truthy)
}

/// A non-empty string field, or `None`.
fn nonempty_str<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    match map.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    }
}

/// A string field, or `""` (also for non-strings).
fn str_or_empty(map: &Map<String, Value>, key: &str) -> String {
    match map.get(key) {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

/// `data.get("tokens", [])` when it is a list; `None` otherwise (the reference returns).
fn tokens(data: &Map<String, Value>) -> Option<&[Value]> {
    match data.get("tokens") {
        None => Some(&[]),
        Some(Value::Array(a)) => Some(a),
        Some(_) => None,
    }
}

/// Python's `isinstance(x, int)` on a JSON value, as an event id.
fn python_int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64(),
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}

/// Python's `str.isspace` (FORMATS.md §1.11).
use crate::pystr::is_space as py_isspace;

impl ConceptGraph {
    /// Folds one event. Events with an id at or below the last folded one are ignored, so
    /// applying an event twice is harmless.
    pub fn apply(&mut self, ev: &Event) {
        self.fold(&Seen::new(ev));
    }

    /// [`ConceptGraph::apply`], the meta parsed at most once for every fold ([`Seen`]).
    pub fn fold(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        if ev.id <= self.last_event_id {
            return;
        }
        let outcome = match ev.kind {
            Kind::ConceptDefine => self.define(s),
            Kind::ConceptAlias => self.alias(ev),
            Kind::ConceptBindEvent | Kind::ConceptBindAsync => self.bind_event(ev),
            Kind::IdentityAdoption => self.adopt_identity(ev),
            Kind::ConceptRelate => self.relate(ev),
            Kind::ConceptBindThread => self.bind_thread(ev),
            _ => Ok(()),
        };
        if outcome.is_err() && self.broken_by.is_none() {
            self.broken_by = Some(ev.id);
        }
        self.last_event_id = ev.id;
    }

    fn define(&mut self, s: &Seen<'_>) -> Result<(), NotAnObject> {
        let ev = s.ev;
        let Some(data) = parse_object(&ev.content)? else {
            return Ok(());
        };
        let Some(token) = nonempty_str(&data, "token") else {
            return Ok(());
        };
        let meta = s.meta_or_empty();
        let def = ConceptDefinition {
            token: token.to_string(),
            concept_kind: str_or_empty(&data, "concept_kind"),
            definition: str_or_empty(&data, "definition"),
            attributes: data.get("attributes").cloned().unwrap_or_else(|| json!({})),
            version: data.get("version").cloned().unwrap_or_else(|| json!(1)),
            concept_id: str_or_empty(meta, "concept_id"),
            event_id: ev.id,
            supersedes: nonempty_str(meta, "supersedes").map(str::to_string),
        };
        if !def.concept_kind.is_empty() {
            self.kinds
                .insert(def.token.clone(), def.concept_kind.clone());
        }
        *self.versions.entry(def.token.clone()).or_default() += 1;
        self.definitions.insert(def.token.clone(), def);
        Ok(())
    }

    fn alias(&mut self, ev: &Event) -> Result<(), NotAnObject> {
        let Some(data) = parse_object(&ev.content)? else {
            return Ok(());
        };
        if let (Some(from), Some(to)) = (nonempty_str(&data, "from"), nonempty_str(&data, "to")) {
            self.aliases.insert(from.to_string(), to.to_string());
        }
        Ok(())
    }

    fn bind(&mut self, token: String, event_id: i64) {
        self.event_concepts
            .entry(event_id)
            .or_default()
            .insert(token.clone());
        self.concept_events
            .entry(token)
            .or_default()
            .insert(event_id);
    }

    fn bind_event(&mut self, ev: &Event) -> Result<(), NotAnObject> {
        let Some(data) = parse_object(&ev.content)? else {
            return Ok(());
        };
        let (Some(event_id), Some(tokens)) = (python_int(data.get("event_id")), tokens(&data))
        else {
            return Ok(());
        };
        let relation = nonempty_str(&data, "relation");
        for token in tokens {
            let Value::String(token) = token else {
                continue;
            };
            let canonical = self.canonical_token(token).to_string();
            if let Some(rel) = relation {
                self.relations
                    .entry(canonical.clone())
                    .or_default()
                    .entry(rel.to_string())
                    .or_default()
                    .insert(event_id);
            }
            self.bind(canonical, event_id);
        }
        Ok(())
    }

    fn adopt_identity(&mut self, ev: &Event) -> Result<(), NotAnObject> {
        let Some(data) = parse_object_or_empty(&ev.content)? else {
            return Ok(());
        };
        let Some(Value::String(token)) = data.get("token") else {
            return Ok(());
        };
        let token = token.trim_matches(py_isspace);
        if token.is_empty() {
            return Ok(());
        }
        let canonical = self.canonical_token(token).to_string();
        self.kinds
            .entry(canonical.clone())
            .or_insert_with(|| "identity".to_string());
        self.bind(canonical, ev.id);
        Ok(())
    }

    fn relate(&mut self, ev: &Event) -> Result<(), NotAnObject> {
        let Some(data) = parse_object(&ev.content)? else {
            return Ok(());
        };
        let (Some(from), Some(to), Some(relation)) = (
            nonempty_str(&data, "from"),
            nonempty_str(&data, "to"),
            nonempty_str(&data, "relation"),
        ) else {
            return Ok(());
        };
        let edge = (
            self.canonical_token(from).to_string(),
            self.canonical_token(to).to_string(),
            relation.to_string(),
        );
        self.edges.insert(edge);
        Ok(())
    }

    fn bind_thread(&mut self, ev: &Event) -> Result<(), NotAnObject> {
        let Some(data) = parse_object_or_empty(&ev.content)? else {
            return Ok(());
        };
        if !truthy(data.get("cid")) {
            return Ok(());
        }
        let (Some(Value::String(cid)), Some(tokens)) = (data.get("cid"), tokens(&data)) else {
            return Ok(());
        };
        let relation = nonempty_str(&data, "relation");
        for token in tokens {
            let Value::String(token) = token else {
                continue;
            };
            let canonical = self.canonical_token(token).to_string();
            self.cid_concepts
                .entry(cid.clone())
                .or_default()
                .insert(canonical.clone());
            if let Some(rel) = relation {
                self.relations
                    .entry(canonical.clone())
                    .or_default()
                    .entry(rel.to_string())
                    .or_default()
                    .insert(THREAD_BINDING_EVENT_ID);
            }
            self.concept_cids
                .entry(canonical)
                .or_default()
                .insert(cid.clone());
        }
        Ok(())
    }

    /// Follows the alias chain from `token` (stopping where a cycle would repeat), so queries
    /// and new bindings land on one canonical token.
    pub fn canonical_token<'a>(&'a self, token: &'a str) -> &'a str {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut current = token;
        while let Some(next) = self.aliases.get(current) {
            if !seen.insert(current) {
                break;
            }
            current = next;
        }
        current
    }

    /// Event ids bound to `token` (alias-resolved), ascending; with `relation`, only bindings
    /// that named it (thread bindings appear as [`THREAD_BINDING_EVENT_ID`]).
    pub fn events_for_concept(&self, token: &str, relation: Option<&str>) -> Vec<i64> {
        let canonical = self.canonical_token(token);
        match relation {
            None => self
                .concept_events
                .get(canonical)
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default(),
            Some(rel) => self
                .relations
                .get(canonical)
                .and_then(|m| m.get(rel))
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default(),
        }
    }

    /// Number of events bound to `token` without building the list.
    fn binding_count(&self, token: &str) -> usize {
        self.concept_events
            .get(self.canonical_token(token))
            .map_or(0, BTreeSet::len)
    }

    /// How many events (ids 1 to `before - 1`) are bound to some concept: the indexed part of
    /// the ledger before a query, against which a concept's share of the bindings is measured.
    pub fn bound_events_before(&self, before: i64) -> usize {
        self.event_concepts.range(1..before.max(1)).count()
    }

    /// Concepts bound to an event, sorted — what a turn or a context block shows for it.
    pub fn concepts_for_event(&self, event_id: i64) -> Vec<String> {
        self.event_concepts
            .get(&event_id)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Commitment cids bound to any of `tokens` (alias-resolved), for thread-aware retrieval.
    pub fn resolve_cids_for_concepts<S: AsRef<str>>(&self, tokens: &[S]) -> BTreeSet<String> {
        tokens
            .iter()
            .filter_map(|t| self.concept_cids.get(self.canonical_token(t.as_ref())))
            .flatten()
            .cloned()
            .collect()
    }

    /// Whether `token` (alias-resolved) is bound to event `event_id`.
    pub fn is_bound(&self, token: &str, event_id: i64) -> bool {
        self.event_concepts
            .get(&event_id)
            .is_some_and(|s| s.contains(self.canonical_token(token)))
    }

    /// Whether `token` (alias-resolved) is bound to commitment `cid`.
    pub fn is_bound_to_thread(&self, token: &str, cid: &str) -> bool {
        self.cid_concepts
            .get(cid)
            .is_some_and(|s| s.contains(self.canonical_token(token)))
    }

    /// How many events `a` and `b` (alias-resolved) are both bound to.
    pub fn co_bound(&self, a: &str, b: &str) -> usize {
        let (Some(x), Some(y)) = (
            self.concept_events.get(self.canonical_token(a)),
            self.concept_events.get(self.canonical_token(b)),
        ) else {
            return 0;
        };
        let (small, large) = if x.len() <= y.len() { (x, y) } else { (y, x) };
        small.iter().filter(|id| large.contains(id)).count()
    }

    /// Whether `a` and `b` (alias-resolved) are related by `relation`, either way.
    pub fn related(&self, a: &str, b: &str, relation: &str) -> bool {
        let (a, b) = (self.canonical_token(a), self.canonical_token(b));
        let has = |x: &str, y: &str| {
            self.edges
                .contains(&(x.to_string(), y.to_string(), relation.to_string()))
        };
        has(a, b) || has(b, a)
    }

    /// The commitment cids bound to `token` (alias-resolved), sorted.
    pub fn threads_for(&self, token: &str) -> Vec<String> {
        self.concept_cids
            .get(self.canonical_token(token))
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The relations touching `token` (alias-resolved), as `(relation, other token)` from its
    /// side: outgoing edges as they are, incoming ones as `<relation> (from)`. Sorted.
    pub fn relations_of(&self, token: &str) -> Vec<(String, String)> {
        let t = self.canonical_token(token);
        let mut out: Vec<(String, String)> = self
            .edges
            .iter()
            .filter_map(|(from, to, rel)| {
                if from == t {
                    Some((rel.clone(), to.clone()))
                } else if to == t {
                    Some((format!("{rel} (from)"), from.clone()))
                } else {
                    None
                }
            })
            .collect();
        out.sort();
        out
    }

    /// Defined tokens, sorted. Tokens that are only bound, never defined, are not concepts yet.
    pub fn all_tokens(&self) -> Vec<String> {
        self.definitions.keys().cloned().collect()
    }

    /// The current definition of `token` (alias-resolved).
    pub fn definition(&self, token: &str) -> Option<&ConceptDefinition> {
        self.definitions.get(self.canonical_token(token))
    }

    /// The reference's `compute_concept_metrics` (FORMATS.md §14.4), embedded in every RSM
    /// snapshot: `concepts_used` (bindings per defined token), `concept_gaps` (fewer than two),
    /// `concept_conflicts` (both a `supports` and a `conflicts_with` neighbour) and
    /// `hot_concepts` (top five by count, then token). `{}` once the reference's rebuild would
    /// have raised (see `broken_by`), as its snapshot catches the exception.
    pub fn concept_metrics(&self) -> Value {
        if self.broken_by.is_some() {
            return json!({});
        }
        // Which canonical tokens touch a `supports` / `conflicts_with` edge: one pass over the
        // edges instead of two neighbour scans per token.
        let mut supports: BTreeSet<&str> = BTreeSet::new();
        let mut conflicts: BTreeSet<&str> = BTreeSet::new();
        for (from, to, rel) in &self.edges {
            let set = match rel.as_str() {
                "supports" => &mut supports,
                "conflicts_with" => &mut conflicts,
                _ => continue,
            };
            set.insert(from);
            set.insert(to);
        }
        let mut used = Map::new();
        let mut counts: Vec<(usize, &str)> = Vec::with_capacity(self.definitions.len());
        let mut gaps = Vec::new();
        let mut conflicted = Vec::new();
        for token in self.definitions.keys() {
            let n = self.binding_count(token);
            used.insert(token.clone(), Value::from(n));
            counts.push((n, token));
            if n < GAP_BELOW {
                gaps.push(Value::from(token.as_str()));
            }
            let canonical = self.canonical_token(token);
            if supports.contains(canonical) && conflicts.contains(canonical) {
                conflicted.push(Value::from(token.as_str()));
            }
        }
        counts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        let hot: Vec<Value> = counts
            .iter()
            .take(HOT_CONCEPTS)
            .map(|(_, t)| Value::from(*t))
            .collect();
        json!({
            "concepts_used": used,
            "concept_gaps": gaps,
            "concept_conflicts": conflicted,
            "hot_concepts": hot,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, kind: &str, content: Value) -> Event {
        Event::sample(id, kind, &content.to_string(), "{}")
    }

    fn define(id: i64, token: &str, kind: &str) -> Event {
        ev(
            id,
            "concept_define",
            json!({"token": token, "concept_kind": kind, "definition": "d", "attributes": {}, "version": 1}),
        )
    }

    fn bind(id: i64, event_id: i64, tokens: &[&str], relation: &str) -> Event {
        ev(
            id,
            "concept_bind_event",
            json!({"event_id": event_id, "tokens": tokens, "relation": relation}),
        )
    }

    fn fold(events: &[Event]) -> ConceptGraph {
        let mut g = ConceptGraph::default();
        for e in events {
            g.apply(e);
        }
        g
    }

    #[test]
    fn aliases_resolve_when_bindings_are_folded_and_cycles_stop() {
        let g = fold(&[
            define(1, "topic.a", "topic"),
            ev(2, "concept_alias", json!({"from": "a", "to": "topic.a"})),
            bind(3, 100, &["a", "topic.a"], "mentions"),
            bind(4, 101, &["b"], ""),
            ev(5, "concept_alias", json!({"from": "b", "to": "c"})),
            ev(6, "concept_alias", json!({"from": "c", "to": "b"})),
        ]);
        assert_eq!(g.events_for_concept("a", None), vec![100]);
        assert_eq!(g.events_for_concept("topic.a", Some("mentions")), vec![100]);
        assert!(g.events_for_concept("topic.a", Some("other")).is_empty());
        assert_eq!(g.concepts_for_event(100), vec!["topic.a".to_string()]);
        // "b" was bound before the alias existed: the binding stays under "b".
        assert_eq!(g.concepts_for_event(101), vec!["b".to_string()]);
        // b → c → b: the walk stops instead of looping.
        assert_eq!(g.canonical_token("b"), "b");
    }

    #[test]
    fn metrics_count_defined_tokens_only_and_rank_hot_concepts() {
        let mut events = vec![
            define(1, "x", "topic"),
            define(2, "y", "topic"),
            define(3, "z", "policy"),
            bind(4, 10, &["y", "x", "undefined"], "r"),
            bind(5, 11, &["y", "x"], "r"),
            bind(6, 12, &["y"], "r"),
            ev(
                7,
                "concept_relate",
                json!({"from": "x", "to": "y", "relation": "supports", "weight": 1.0}),
            ),
            ev(
                8,
                "concept_relate",
                json!({"from": "z", "to": "x", "relation": "conflicts_with", "weight": 1.0}),
            ),
        ];
        events.push(ev(
            9,
            "identity_adoption",
            json!({"token": " identity.Echo "}),
        ));
        let g = fold(&events);
        let m = g.concept_metrics();
        assert_eq!(m["concepts_used"], json!({"x": 2, "y": 3, "z": 0}));
        assert_eq!(m["concept_gaps"], json!(["z"]));
        assert_eq!(m["concept_conflicts"], json!(["x"]));
        assert_eq!(m["hot_concepts"], json!(["y", "x", "z"]));
        assert_eq!(g.all_tokens(), vec!["x", "y", "z"]);
        let edge = |f: &str, t: &str, r: &str| (f.to_string(), t.to_string(), r.to_string());
        assert_eq!(
            g.edges,
            BTreeSet::from([edge("x", "y", "supports"), edge("z", "x", "conflicts_with")])
        );
        let kinds: Vec<(&str, &str)> = g
            .kinds
            .iter()
            .map(|(t, k)| (t.as_str(), k.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("identity.Echo", "identity"),
                ("x", "topic"),
                ("y", "topic"),
                ("z", "policy")
            ]
        );
        assert_eq!(g.events_for_concept("identity.Echo", None), vec![9]);
        let bindings: usize = g.concept_events.values().map(BTreeSet::len).sum();
        assert_eq!(bindings, 3 + 2 + 1 + 1);
        assert_eq!(g.last_event_id, 9);
    }

    #[test]
    fn non_object_json_content_empties_the_metrics_like_the_reference_exception() {
        let g = fold(&[
            define(1, "x", "topic"),
            ev(2, "concept_bind_event", json!([1, 2])),
        ]);
        assert_eq!(g.broken_by, Some(2));
        assert_eq!(g.concept_metrics(), json!({}));
        // Plain text is not JSON: the reference returns quietly.
        let mut e = ev(2, "concept_bind_event", json!(null));
        e.content = "not json".into();
        let g = fold(&[define(1, "x", "topic"), e]);
        assert_eq!(g.broken_by, None);
    }

    #[test]
    fn replays_and_stale_ids_are_ignored() {
        let mut g = fold(&[define(1, "x", "t"), bind(3, 10, &["x"], "")]);
        let before = g.clone();
        g.apply(&bind(2, 11, &["x"], ""));
        g.apply(&bind(3, 12, &["x"], ""));
        assert_eq!(g, before);
    }

    #[test]
    fn thread_bindings_map_cids_both_ways() {
        let g = fold(&[ev(
            1,
            "concept_bind_thread",
            json!({"cid": "abc", "relation": "relevant_to", "tokens": ["t"]}),
        )]);
        assert_eq!(g.cid_concepts["abc"].len(), 1);
        assert!(g.resolve_cids_for_concepts(&["t"]).contains("abc"));
        assert_eq!(
            g.events_for_concept("t", Some("relevant_to")),
            vec![THREAD_BINDING_EVENT_ID]
        );
        assert!(g.events_for_concept("t", None).is_empty());
    }

    #[test]
    fn a_checkpoint_keeps_the_whole_state() {
        let g = fold(&[
            define(1, "x", "t"),
            bind(2, 10, &["x"], "r"),
            ev(
                3,
                "concept_relate",
                json!({"from": "x", "to": "y", "relation": "supports", "weight": 0.5}),
            ),
        ]);
        // Through the bytes a projection checkpoint stores (MessagePack).
        let saved = crate::projection::state::Projections {
            concepts: g.clone(),
            ..Default::default()
        }
        .to_checkpoint();
        let back = crate::projection::state::Projections::from_checkpoint(&saved)
            .expect("the checkpoint reads back")
            .concepts;
        assert_eq!(back, g);
    }

    #[test]
    fn redefinitions_replace_the_current_definition_and_count_versions() {
        let define = |id: i64, def: &str| Event {
            id,
            ts: String::new(),
            kind: "concept_define".into(),
            content: format!(
                r#"{{"concept_kind":"topic","definition":"{def}","token":"t.a","version":1}}"#
            ),
            meta: "{}".into(),
            prev_hash: None,
            hash: None,
        };
        let mut g = ConceptGraph::default();
        g.apply(&define(1, "first"));
        g.apply(&define(2, "second"));
        assert_eq!(
            g.definition("t.a").map(|d| d.definition.as_str()),
            Some("second")
        );
        assert_eq!(g.versions["t.a"], 2);
        assert!(!g.versions.contains_key("t.b"));
        assert_eq!(g.all_tokens(), ["t.a"]);
    }
}
