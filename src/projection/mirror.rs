//! The Mirror: open and closed commitments by cid, identity, the retrieval config in force and
//! the autonomy thresholds in force — a pure fold over events in id order (SPEC §5,
//! FORMATS.md §5.1, §4.3, §4.4, §8.3).
//!
//! Unlike the reference's Mirror it never skips an event (the fold is fed every event in id
//! order, once), and thresholds are part of the projection, so replay reproduces the
//! thresholds in force at any event (the reference keeps them in memory only).

use crate::event::config::Threshold;
use crate::event::{Event, Kind, NewEvent, Seen, Source};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha1::{Digest as _, Sha1};
use std::collections::BTreeMap;

/// A commitment's cid: the first 8 hex digits of the sha1 of its (stripped) text, as the
/// reference derives it (FORMATS.md §3.2): `engage_with_PMM_creator_tests` → `e86ccfd1`.
pub fn commitment_cid(text: &str) -> String {
    let digest = Sha1::digest(text.as_bytes());
    digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// The `commitment_open` of a commitment to `text` (a `COMMIT:` line's or an MCP `commit`'s,
/// stripped), the one every writer of such a commitment appends: content `Commitment opened:
/// <text>`, meta `cid` ([`commitment_cid`]), `impact_score`, `origin`, `source` and `text`
/// (FORMATS.md §3.2). `pmm-verify --deep` recomputes the cid from `meta.text`.
pub fn commitment_open(text: &str, impact_score: f64, origin: &str, source: &str) -> NewEvent {
    let mut meta = Map::new();
    meta.insert("cid".into(), commitment_cid(text).into());
    // A finite score is a number, anything else `null` (serde_json's own rule): canonical.
    meta.insert("impact_score".into(), impact_score.into());
    meta.insert("origin".into(), origin.into());
    meta.insert("source".into(), source.into());
    meta.insert("text".into(), text.into());
    NewEvent {
        kind: Kind::CommitmentOpen,
        content: format!("Commitment opened: {text}"),
        meta,
    }
}

/// The content of an internal goal's `commitment_open` (the kernel's `mc_` cids).
pub fn internal_open_content(goal: &str) -> String {
    format!("Internal commitment opened: {goal}")
}

/// The content of a `commitment_close` of `cid` (FORMATS.md §2), whoever closes it (a reply's
/// `CLOSE:`, the kernel's auto-close, MCP's `close`); `pmm-verify --deep` compares every
/// close with it (or with [`internal_close_content`]).
pub fn close_content(cid: &str) -> String {
    format!("Commitment closed: {cid}")
}

/// The content of the `commitment_close` of an internal goal `cid` (the kernel's `mc_` cids).
pub fn internal_close_content(cid: &str) -> String {
    format!("Internal commitment closed: {cid}")
}

/// One commitment, as the Mirror knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commitment {
    /// Its cid (`meta.cid` of the opening event).
    pub cid: String,
    /// What was committed to (`meta.text`, or `meta.goal` for internal goals).
    pub text: String,
    /// The `commitment_open` event.
    pub opened_at: i64,
    /// Who opened it (`meta.source`, default `user` as in the reference).
    pub source: String,
    /// `meta.origin` (`assistant`, `user`, `autonomy_kernel`), empty when absent.
    pub origin: String,
    /// The `commitment_close` event, for closed commitments.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub closed_at: Option<i64>,
    /// Why it was closed (`meta.reason`), when the close says.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// Why the kernel opened it (`meta.cause`), for a goal that stays open until a thinking
    /// tick works it (`kernel::goals`, "Goals that stay open").
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cause: Option<String>,
}

/// Who the agent is, as far as the ledger says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// `new_name` of the newest `name_change` claim.
    pub name: Option<String>,
    /// The claim event that set it.
    pub name_event: Option<i64>,
    /// Tokens adopted through `identity_adoption` events, in adoption order.
    pub adopted: Vec<String>,
    /// The earliest `identity_proposal` claim event per token (FORMATS.md §4.3).
    #[serde(default)]
    pub proposals: BTreeMap<String, i64>,
    /// The earliest `identity_ratify` claim event per token.
    #[serde(default)]
    pub ratifications: BTreeMap<String, i64>,
}

impl Identity {
    /// Folds in an `identity_proposal` / `identity_ratify` claim (FORMATS.md §4.3), the one
    /// rule for identity adoption: the content must be `CLAIM:<same type>=<object with a
    /// non-empty string token>` (header and token Python-stripped, as the reference strips
    /// them); the earliest claim per token counts, whatever order the claims come in.
    pub fn note_claim(&mut self, id: i64, claim_type: &str, content: &str) {
        let map = match claim_type {
            "identity_proposal" => &mut self.proposals,
            "identity_ratify" => &mut self.ratifications,
            _ => return,
        };
        let Some(token) = claimed_token(claim_type, content) else {
            return;
        };
        map.entry(token)
            .and_modify(|e| *e = (*e).min(id))
            .or_insert(id);
    }

    /// Tokens proposed and ratified but not adopted yet, sorted, with their proposal and
    /// ratification events: what the next `identity_adoption` events must record.
    pub fn pending_adoptions(&self) -> Vec<(String, i64, i64)> {
        self.proposals
            .iter()
            .filter(|(t, _)| !self.adopted.contains(t))
            .filter_map(|(t, &p)| self.ratifications.get(t).map(|&r| (t.clone(), p, r)))
            .collect()
    }
}

/// The stripped token of a `CLAIM:<claim_type>={"token":…}` content.
fn claimed_token(claim_type: &str, content: &str) -> Option<String> {
    let (header, json) = content.strip_prefix("CLAIM:")?.split_once('=')?;
    if crate::marker::py_strip(header) != claim_type {
        return None;
    }
    let Ok(Value::Object(data)) = serde_json::from_str::<Value>(json) else {
        return None;
    };
    let token = crate::marker::py_strip(data.get("token")?.as_str()?);
    (!token.is_empty()).then(|| token.to_string())
}

/// The default `index_threshold`.
pub const DEFAULT_INDEX_THRESHOLD: i64 = 20;

fn default_index_threshold() -> i64 {
    DEFAULT_INDEX_THRESHOLD
}

/// The range learning keeps a threshold in (FORMATS.md §8.3).
pub const LEARN_RANGE: std::ops::RangeInclusive<i64> = 5..=100;

/// The autonomy thresholds in force (defaults 10/50/20/27, FORMATS.md §8.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Events between autonomous reflections.
    pub reflection_interval: i64,
    /// Events between summaries.
    pub summary_interval: i64,
    /// Events after which an open commitment counts as stalled.
    pub commitment_staleness: i64,
    /// Events after which a stale commitment may be auto-closed.
    pub commitment_auto_close: i64,
    /// Unindexed messages that call for an `index` tick (pmm's; not in the reference).
    #[serde(default = "default_index_threshold")]
    pub index_threshold: i64,
    /// The event that set them (`autonomy_rule_table`, `config`, `policy_update` or
    /// `meta_policy_update`), none for the defaults.
    pub set_by: Option<i64>,
    /// Thresholds a user set (`config` of type `autonomy_thresholds`): learning leaves them
    /// alone until a config lists them under `unset`.
    #[serde(default)]
    pub pinned: std::collections::BTreeSet<String>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            reflection_interval: 10,
            summary_interval: 50,
            commitment_staleness: 20,
            commitment_auto_close: 27,
            index_threshold: DEFAULT_INDEX_THRESHOLD,
            set_by: None,
            pinned: Default::default(),
        }
    }
}

impl Thresholds {
    fn slot(&mut self, key: Threshold) -> &mut i64 {
        match key {
            Threshold::ReflectionInterval => &mut self.reflection_interval,
            Threshold::SummaryInterval => &mut self.summary_interval,
            Threshold::CommitmentStaleness => &mut self.commitment_staleness,
            Threshold::CommitmentAutoClose => &mut self.commitment_auto_close,
            Threshold::IndexThreshold => &mut self.index_threshold,
        }
    }

    fn set(&mut self, key: Threshold, value: i64) -> bool {
        // Out of range (never written by pmm; an imported ledger's): not in force.
        if !crate::event::config::THRESHOLD_RANGE.contains(&value) {
            return false;
        }
        *self.slot(key) = value;
        true
    }

    /// The value of the threshold `key`.
    pub fn get(&self, key: Threshold) -> i64 {
        match key {
            Threshold::ReflectionInterval => self.reflection_interval,
            Threshold::SummaryInterval => self.summary_interval,
            Threshold::CommitmentStaleness => self.commitment_staleness,
            Threshold::CommitmentAutoClose => self.commitment_auto_close,
            Threshold::IndexThreshold => self.index_threshold,
        }
    }

    /// Moves the threshold `key` one step (`delta` ±1) as learning does (FORMATS.md §8.3):
    /// clamped to [`LEARN_RANGE`], never a pinned one. Whether it moved.
    pub fn nudge(&mut self, key: Threshold, delta: i64) -> bool {
        if self.pinned.contains(key.as_str()) {
            return false;
        }
        let now = self.get(key);
        let next = (now + delta).clamp(*LEARN_RANGE.start(), *LEARN_RANGE.end());
        next != now && self.set(key, next)
    }

    /// Every threshold's value as a JSON object keyed by name (the `thresholds` of a
    /// `policy_update`, the state record's).
    pub fn values(&self) -> Map<String, Value> {
        Threshold::ALL
            .iter()
            .map(|k| (k.as_str().to_string(), self.get(*k).into()))
            .collect()
    }

    /// Applies a `policy_update` of type `adaptive_learning`: each entry of `changes` whose
    /// action has a threshold moves it (`increase_frequency` −1, `decrease_frequency` +1).
    pub fn apply_policy(&mut self, content: &Value) -> bool {
        if content.get("type").and_then(Value::as_str) != Some("adaptive_learning") {
            return false;
        }
        let mut moved = false;
        for (action, change) in content
            .get("changes")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let key = match action.as_str() {
                "reflect" | "autonomy_reflect" => Threshold::ReflectionInterval,
                "summarize" | "autonomy_summarize" => Threshold::SummaryInterval,
                _ => continue,
            };
            let delta = match change.as_str() {
                Some("increase_frequency") => -1,
                Some("decrease_frequency") => 1,
                _ => continue,
            };
            moved |= self.nudge(key, delta);
        }
        moved
    }

    /// Applies a `meta_policy_update`: each suggestion for `reflection_interval` moves it
    /// (`increase` +1, `decrease` −1).
    pub fn apply_meta_policy(&mut self, content: &Value) -> bool {
        let mut moved = false;
        for s in content
            .get("suggestions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if s.get("param").and_then(Value::as_str)
                != Some(Threshold::ReflectionInterval.as_str())
            {
                continue;
            }
            let delta = match s.get("suggested_change").and_then(Value::as_str) {
                Some("increase") => 1,
                Some("decrease") => -1,
                _ => continue,
            };
            moved |= self.nudge(Threshold::ReflectionInterval, delta);
        }
        moved
    }

    /// The reference's `autonomy_rule_table` text:
    /// `{reflection_interval:10,summary_interval:50,commitment_staleness:20,commitment_auto_close:27}`,
    /// with pmm's `,index_threshold:N` before the brace when it is not the default (so that a
    /// reference ledger's rule table still reads as the thresholds in force).
    pub fn rule_table_text(&self) -> String {
        let pairs: Vec<String> = Threshold::ALL
            .iter()
            .filter(|k| {
                **k != Threshold::IndexThreshold || self.index_threshold != DEFAULT_INDEX_THRESHOLD
            })
            .map(|k| format!("{k}:{}", self.get(*k)))
            .collect();
        format!("{{{}}}", pairs.join(","))
    }
}

/// The Mirror fold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Mirror {
    /// Open commitments by cid.
    pub open: BTreeMap<String, Commitment>,
    /// Closed commitments by cid (the latest close of each).
    pub closed: BTreeMap<String, Commitment>,
    /// Identity.
    pub identity: Identity,
    /// Content of the newest `config` whose JSON `type` is `retrieval`.
    pub retrieval: Option<Value>,
    /// Thresholds in force.
    pub thresholds: Thresholds,
    /// Per cid: how many times it was opened and how many closes it got (the history behind
    /// a new commitment's `impact_score`, FORMATS.md §3.3.1).
    #[serde(default)]
    pub history: BTreeMap<String, (u64, u64)>,
    /// The last event folded in.
    pub last_event_id: i64,
    /// Its hash.
    pub last_hash: Option<String>,
}

fn meta_str(meta: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    meta.get(key).and_then(Value::as_str).map(str::to_string)
}

impl Mirror {
    /// The kernel's internal goals worked (docs/autonomy.md, "Internal goals": opened and
    /// closed within one tick): how many, and the newest closed.
    pub fn internal_goals_worked(&self) -> (usize, Option<&Commitment>) {
        let worked: Vec<&Commitment> = self
            .closed
            .values()
            .filter(|c| c.origin == Source::AutonomyKernel && c.cid.starts_with("mc_"))
            .collect();
        let newest = worked.iter().max_by_key(|c| c.closed_at).copied();
        (worked.len(), newest)
    }

    /// Folds one event in.
    pub fn apply(&mut self, ev: &Event) {
        self.fold(&Seen::new(ev));
    }

    /// [`Mirror::apply`], the meta parsed at most once for every fold ([`Seen`]).
    pub fn fold(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        self.last_event_id = ev.id;
        self.last_hash = ev.hash.clone();
        match ev.kind {
            Kind::CommitmentOpen => self.apply_open(ev, s.meta_or_empty()),
            Kind::CommitmentClose => self.apply_close(ev, s.meta_or_empty()),
            Kind::Claim => self.apply_claim(ev, s.meta_or_empty()),
            Kind::IdentityAdoption => self.apply_adoption(ev),
            Kind::Config => self.apply_config(ev),
            Kind::AutonomyRuleTable => self.apply_rule_table(ev),
            Kind::PolicyUpdate | Kind::MetaPolicyUpdate => self.apply_learning(ev),
            _ => {}
        }
    }

    /// A `commitment_open`: the commitment (keyed by its non-empty `meta.cid`) becomes open,
    /// leaves the closed set, and its open count grows by one.
    fn apply_open(&mut self, ev: &Event, meta: &Map<String, Value>) {
        let Some(cid) = meta_str(meta, "cid").filter(|c| !c.is_empty()) else {
            return;
        };
        let text = meta_str(meta, "text")
            .or_else(|| meta_str(meta, "goal"))
            .unwrap_or_default();
        self.closed.remove(&cid);
        self.history.entry(cid.clone()).or_default().0 += 1;
        self.open.insert(
            cid.clone(),
            Commitment {
                cid,
                text,
                opened_at: ev.id,
                source: meta_str(meta, "source").unwrap_or_else(|| "user".into()),
                origin: meta_str(meta, "origin").unwrap_or_default(),
                closed_at: None,
                reason: None,
                cause: meta_str(meta, "cause"),
            },
        );
    }

    /// A `commitment_close`: counts the close against `meta.cid`'s history and moves the
    /// commitment, if open, to the closed set with its reason.
    fn apply_close(&mut self, ev: &Event, meta: &Map<String, Value>) {
        let Some(cid) = meta_str(meta, "cid") else {
            return;
        };
        if let Some(h) = self.history.get_mut(&cid) {
            h.1 += 1;
        }
        if let Some(mut c) = self.open.remove(&cid) {
            c.closed_at = Some(ev.id);
            c.reason = meta_str(meta, "reason");
            self.closed.insert(cid, c);
        }
    }

    /// A `claim`: identity proposals and ratifications go to the identity; a `name_change`
    /// sets the name from the JSON after `=` in the content; other claims are ignored.
    fn apply_claim(&mut self, ev: &Event, meta: &Map<String, Value>) {
        let claim_type = meta_str(meta, "claim_type").unwrap_or_default();
        if claim_type == "identity_proposal" || claim_type == "identity_ratify" {
            self.identity.note_claim(ev.id, &claim_type, &ev.content);
            return;
        }
        if claim_type != "name_change" {
            return;
        }
        let payload = ev.content.split_once('=').map(|(_, p)| p).unwrap_or("");
        if let Ok(Value::Object(data)) = serde_json::from_str::<Value>(payload) {
            if let Some(name) = data.get("new_name").and_then(Value::as_str) {
                self.identity.name = Some(name.to_string());
                self.identity.name_event = Some(ev.id);
            }
        }
    }

    /// An `identity_adoption`: adds its `token` to the adopted tokens, once.
    fn apply_adoption(&mut self, ev: &Event) {
        if let Ok(Value::Object(c)) = serde_json::from_str::<Value>(&ev.content) {
            if let Some(tok) = c.get("token").and_then(Value::as_str) {
                if !self.identity.adopted.iter().any(|t| t == tok) {
                    self.identity.adopted.push(tok.to_string());
                }
            }
        }
    }

    /// A `config`: a `retrieval` config replaces the retrieval settings; an
    /// `autonomy_thresholds` config sets each integer threshold it names.
    fn apply_config(&mut self, ev: &Event) {
        if let Ok(Value::Object(c)) = serde_json::from_str::<Value>(&ev.content) {
            match c.get("type").and_then(Value::as_str) {
                Some("retrieval") => self.retrieval = Some(Value::Object(c)),
                Some("autonomy_thresholds") => {
                    let mut changed = false;
                    for (k, v) in &c {
                        if let (Some(key), Some(n)) = (Threshold::parse(k), v.as_i64()) {
                            changed |= self.thresholds.set(key, n);
                            if self.thresholds.get(key) == n {
                                self.thresholds.pinned.insert(k.clone());
                            }
                        }
                    }
                    for k in c
                        .get("unset")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(k) = k.as_str() {
                            self.thresholds.pinned.remove(k);
                        }
                    }
                    if changed {
                        self.thresholds.set_by = Some(ev.id);
                    }
                }
                _ => {}
            }
        }
    }

    /// A `policy_update` or `meta_policy_update`: learning moves unpinned thresholds.
    fn apply_learning(&mut self, ev: &Event) {
        let Ok(c) = serde_json::from_str::<Value>(&ev.content) else {
            return;
        };
        let moved = match ev.kind {
            Kind::PolicyUpdate => self.thresholds.apply_policy(&c),
            _ => self.thresholds.apply_meta_policy(&c),
        };
        if moved {
            self.thresholds.set_by = Some(ev.id);
        }
    }

    /// An `autonomy_rule_table`: `{reflection_interval:10,summary_interval:50,...}`; the
    /// reference writes it after every change, so it is the record of the thresholds in force.
    fn apply_rule_table(&mut self, ev: &Event) {
        let body = ev
            .content
            .trim()
            .trim_start_matches('{')
            .trim_end_matches('}');
        let mut changed = false;
        if !body.contains(Threshold::IndexThreshold.as_str()) {
            changed |= self
                .thresholds
                .set(Threshold::IndexThreshold, DEFAULT_INDEX_THRESHOLD);
        }
        for pair in body.split(',') {
            if let Some((k, v)) = pair.split_once(':') {
                if let (Some(key), Ok(n)) = (Threshold::parse(k.trim()), v.trim().parse::<i64>()) {
                    changed |= self.thresholds.set(key, n);
                }
            }
        }
        if changed {
            self.thresholds.set_by = Some(ev.id);
        }
    }

    /// Open commitments in the order they were opened.
    pub fn open_in_order(&self) -> Vec<&Commitment> {
        let mut v: Vec<&Commitment> = self.open.values().collect();
        v.sort_by_key(|c| c.opened_at);
        v
    }

    /// The kernel's goals that stay open until a thinking tick works them (those with a
    /// `cause`), oldest first.
    pub fn open_goals(&self) -> Vec<&Commitment> {
        let mut v: Vec<&Commitment> = self.open.values().filter(|c| c.cause.is_some()).collect();
        v.sort_by_key(|c| c.opened_at);
        v
    }

    /// Whether the kernel ever opened a goal for `cause` (open or closed since).
    pub fn goal_cause_used(&self, cause: &str) -> bool {
        let has = |c: &Commitment| c.cause.as_deref() == Some(cause);
        self.open.values().any(has) || self.closed.values().any(has)
    }
}

#[cfg(test)]
mod tests {

    /// The claim header is Python-stripped (\x1c is whitespace to Python's
    /// str.strip and not to Rust's trim), as claim::adoptions and the reference read it.
    #[test]
    fn identity_claims_strip_as_python_does() {
        let mut id = Identity::default();
        id.note_claim(
            3,
            "identity_proposal",
            "CLAIM:\x1cidentity_proposal ={\"token\":\" Echo\"}",
        );
        id.note_claim(
            2,
            "identity_ratify",
            "CLAIM:identity_ratify={\"token\":\"Echo\"}",
        );
        assert_eq!(id.pending_adoptions(), [("Echo".to_string(), 3, 2)]);
        let batch = crate::claim::adoptions(
            [
                (
                    3,
                    "identity_proposal",
                    "CLAIM:\x1cidentity_proposal ={\"token\":\" Echo\"}",
                ),
                (
                    2,
                    "identity_ratify",
                    "CLAIM:identity_ratify={\"token\":\"Echo\"}",
                ),
            ]
            .into_iter(),
            &Default::default(),
        );
        assert_eq!(batch, id.pending_adoptions());
    }

    use super::*;

    fn ev(id: i64, kind: &str, content: &str, meta: &str) -> Event {
        Event {
            hash: Some(format!("h{id}")),
            ..Event::sample(id, kind, content, meta)
        }
    }

    #[test]
    fn cid_matches_the_reference() {
        assert_eq!(commitment_cid("engage_with_PMM_creator_tests"), "e86ccfd1");
        assert_eq!(commitment_cid("note this item"), "e2eb5791");
    }

    #[test]
    fn a_commitment_open_has_a_canonical_meta_and_folds_open() {
        for score in [0.25, f64::NAN] {
            let ev = commitment_open("note this item", score, "assistant", "mcp");
            let checked = NewEvent::new(ev.kind.clone(), ev.content.clone(), ev.meta.clone());
            assert_eq!(checked.expect("canonical meta").meta, ev.meta);
        }
        let ev = commitment_open("note this item", 0.5, "assistant", "mcp");
        assert_eq!(ev.content, "Commitment opened: note this item");
        let meta = crate::canon::to_string(&Value::Object(ev.meta)).unwrap();
        let mut m = Mirror::default();
        m.apply(&Event::sample(1, "commitment_open", &ev.content, &meta));
        assert_eq!(m.open["e2eb5791"].text, "note this item");
        m.apply(&Event::sample(
            2,
            "commitment_close",
            &close_content("e2eb5791"),
            r#"{"cid":"e2eb5791"}"#,
        ));
        assert!(m.open.is_empty());
    }

    #[test]
    fn commitments_identity_config_thresholds() {
        let mut m = Mirror::default();
        m.apply(&ev(
            1,
            "commitment_open",
            "",
            r#"{"cid":"aa","text":"do x","source":"assistant","origin":"assistant"}"#,
        ));
        m.apply(&ev(
            2,
            "commitment_open",
            "",
            r#"{"cid":"mc_000002","goal":"g","origin":"autonomy_kernel"}"#,
        ));
        m.apply(&ev(
            3,
            "commitment_close",
            "",
            r#"{"cid":"aa","reason":"done"}"#,
        ));
        m.apply(&ev(4, "commitment_close", "", r#"{"cid":"zz"}"#));
        m.apply(&ev(
            5,
            "claim",
            r#"CLAIM:name_change={"new_name":"Echo"}"#,
            r#"{"claim_type":"name_change","validated":true}"#,
        ));
        m.apply(&ev(
            6,
            "identity_adoption",
            r#"{"reason":"identity_proposal+ratification","token":"Echo"}"#,
            "{}",
        ));
        m.apply(&ev(
            7,
            "config",
            r#"{"type":"retrieval","strategy":"fixed","limit":3}"#,
            "{}",
        ));
        m.apply(&ev(8, "autonomy_rule_table", "{reflection_interval:9,summary_interval:50,commitment_staleness:20,commitment_auto_close:27}", "{}"));
        m.apply(&ev(
            9,
            "config",
            r#"{"type":"autonomy_thresholds","summary_interval":40}"#,
            "{}",
        ));
        assert_eq!(m.open.keys().collect::<Vec<_>>(), ["mc_000002"]);
        assert_eq!(m.open["mc_000002"].source, "user");
        assert_eq!(m.closed["aa"].closed_at, Some(3));
        assert_eq!(m.closed["aa"].reason.as_deref(), Some("done"));
        assert_eq!(m.identity.name.as_deref(), Some("Echo"));
        assert_eq!(m.identity.adopted, ["Echo"]);
        assert_eq!(m.retrieval.as_ref().unwrap()["limit"], 3);
        assert_eq!(
            (
                m.thresholds.reflection_interval,
                m.thresholds.summary_interval
            ),
            (9, 40)
        );
        assert_eq!(m.thresholds.set_by, Some(9));
        assert_eq!(Thresholds::default().rule_table_text(), "{reflection_interval:10,summary_interval:50,commitment_staleness:20,commitment_auto_close:27}");
        assert_eq!((m.last_event_id, m.last_hash.as_deref()), (9, Some("h9")));
    }
}
