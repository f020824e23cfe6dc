//! All projections together: the fold `pmm-replay --state` prints, and the unit a projection
//! checkpoint stores.

use super::adapt::AdaptLog;
use super::autonomy::AutonomyLog;
use super::concepts::ConceptGraph;
use super::graph::GraphCounts;
use super::mirror::Mirror;
use super::rsm::{Rsm, RsmMark, SnapshotView};
use super::supersession::Supersession;
use crate::event::{Event, Seen};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::io::{self, Write};

/// Every projection, folded together over events in id order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Projections {
    /// Commitments, identity, retrieval config, thresholds.
    pub mirror: Mirror,
    /// The Recursive Self-Model.
    pub rsm: Rsm,
    /// The concept graph (the self-model's `concept_metrics` come from it).
    pub concepts: ConceptGraph,
    /// The event graph's statistics.
    pub graph: GraphCounts,
    /// What the autonomy kernel decides from.
    #[serde(default)]
    pub autonomy: AutonomyLog,
    /// What the adaptive loop watches: stability, coherence, outcomes and learning.
    #[serde(default)]
    pub adapt: AdaptLog,
    /// The self-model's tendencies and gaps just after the newest `summary_update` (what the
    /// kernel's drift goal compares with; `None` before the first).
    #[serde(default)]
    pub at_summary: Option<RsmMark>,
    /// Which events later events correct (`meta.supersedes`).
    #[serde(default)]
    pub supersession: Supersession,
}

impl Projections {
    /// Folds one event into every projection.
    pub fn apply(&mut self, ev: &Event) {
        self.fold(&Seen::new(ev));
    }

    /// [`Projections::apply`] for an event whose meta may already be parsed: every fold reads
    /// it from `s`, which parses it at most once.
    pub fn fold(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        self.mirror.fold(s);
        self.rsm.apply(ev);
        self.concepts.fold(s);
        self.graph.fold(s);
        self.autonomy.fold(s);
        self.adapt.apply(ev);
        self.supersession.fold(s);
        if self.autonomy.last_summary == Some(ev.id) {
            self.at_summary = Some(self.rsm.mark());
        }
    }

    /// The kernel's internal goals worked (opened, then closed; docs/autonomy.md): how many,
    /// and the newest `{cid, goal, closed_at}`; and those open (`{cid, goal, cause,
    /// opened_at}`, goals that stay open until a thinking tick works them).
    fn internal_goals(&self) -> Value {
        let (worked, newest) = self.mirror.internal_goals_worked();
        let newest =
            newest.map(|c| json!({"cid": c.cid, "goal": c.text, "closed_at": c.closed_at}));
        let open: Vec<Value> = self
            .mirror
            .open_goals()
            .into_iter()
            .map(|c| json!({"cid": c.cid, "goal": c.text, "cause": c.cause, "opened_at": c.opened_at}))
            .collect();
        json!({"worked": worked, "newest": newest, "open": open})
    }

    /// The `{"type":"state"}` record (SPEC §4 pmm-replay), as a borrowing view that
    /// serializes straight from the folds. Deterministic: the same ledger gives the same bytes
    /// on every run and machine.
    pub fn state_record(&self) -> StateRecord<'_> {
        let m = &self.mirror;
        let open = m
            .open_in_order()
            .into_iter()
            .map(|c| {
                json!({
                    "cid": c.cid,
                    "text": c.text,
                    "opened_at": c.opened_at,
                    "source": c.source,
                    "origin": c.origin,
                })
            })
            .collect();
        let a = &self.autonomy;
        StateRecord {
            adaptation: self.adapt.summary(),
            autonomy: json!({
                "ticks_total": a.ticks_total,
                "reflect_count": a.reflect_count,
                "idle_count": a.idle_count,
                "intention_summarize_count": a.intention_summarize_count,
                "summarize_count": a.summarize_count,
                "last_kernel_reflection": a.last_reflection_id,
                "last_summary": a.last_summary,
                "last_slot": a.last_stimulus.as_ref().map(|s| s.1),
                "internal_goals": self.internal_goals(),
            }),
            closed_commitments: m.closed.len(),
            concept_metrics: self.concepts.concept_metrics(),
            graph: self.graph.stats(),
            identity: json!({"name": m.identity.name, "adopted": m.identity.adopted}),
            last_event_id: m.last_event_id,
            last_hash: m.last_hash.as_deref(),
            open_commitments: open,
            retrieval: m.retrieval.as_ref(),
            rsm: self.rsm.snapshot_view(&self.concepts),
            supersession: (!self.supersession.is_empty()).then(|| self.supersession.state_value()),
            thresholds: {
                let mut t = m.thresholds.values();
                t.insert("set_by".into(), json!(m.thresholds.set_by));
                t.insert("pinned".into(), json!(m.thresholds.pinned));
                Value::Object(t)
            },
        }
    }
}

/// The `{"type":"state"}` record: see [`Projections::state_record`].
pub struct StateRecord<'a> {
    adaptation: Value,
    autonomy: Value,
    closed_commitments: usize,
    concept_metrics: Value,
    graph: Value,
    identity: Value,
    last_event_id: i64,
    last_hash: Option<&'a str>,
    open_commitments: Vec<Value>,
    retrieval: Option<&'a Value>,
    rsm: SnapshotView<'a>,
    /// Only on a ledger with corrections, so the record of one without is as it was.
    supersession: Option<Value>,
    thresholds: Value,
}

impl StateRecord<'_> {
    /// Appends the record as one compact JSON object (no newline), keys in code-point order
    /// as a `serde_json::Map` orders them, so that the bytes do not depend on how the record
    /// is built.
    pub fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        fn field<T: Serialize + ?Sized>(
            out: &mut dyn Write,
            key: &str,
            value: &T,
        ) -> io::Result<()> {
            out.write_all(key.as_bytes())?;
            serde_json::to_writer(&mut *out, value).map_err(io::Error::other)
        }
        field(out, "{\"adaptation\":", &self.adaptation)?;
        field(out, ",\"autonomy\":", &self.autonomy)?;
        field(out, ",\"closed_commitments\":", &self.closed_commitments)?;
        field(out, ",\"concept_metrics\":", &self.concept_metrics)?;
        field(out, ",\"graph\":", &self.graph)?;
        field(out, ",\"identity\":", &self.identity)?;
        field(out, ",\"last_event_id\":", &self.last_event_id)?;
        field(out, ",\"last_hash\":", &self.last_hash)?;
        field(out, ",\"open_commitments\":", &self.open_commitments)?;
        field(out, ",\"retrieval\":", &self.retrieval)?;
        out.write_all(b",\"rsm\":")?;
        self.rsm.write_json(out)?;
        if let Some(s) = &self.supersession {
            field(out, ",\"supersession\":", s)?;
        }
        field(out, ",\"thresholds\":", &self.thresholds)?;
        out.write_all(b",\"type\":\"state\"}")?;
        Ok(())
    }

    /// The record as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut bytes = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = self.write_json(&mut bytes);
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }
}

impl Projections {
    /// The bytes of a projection checkpoint: MessagePack with structs as maps of field names.
    /// Self-describing like JSON, so any derived field reads back as it would from JSON
    /// (`serde_json::Value` — whose arbitrary-precision numbers are such maps —,
    /// `skip_serializing_if`, `default`); the heavy fields are byte strings (`#[serde(with)]`),
    /// so loading the checkpoint of a 10⁶-event ledger copies them instead of parsing ~0.8 MB.
    pub fn to_checkpoint(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).unwrap_or_default()
    }

    /// Reads checkpoint bytes written by [`Projections::to_checkpoint`]; `None` when they are
    /// not such bytes (a checkpoint is a cache: the caller rebuilds instead).
    pub fn from_checkpoint(bytes: &[u8]) -> Option<Projections> {
        rmp_serde::from_slice(bytes).ok()
    }
}
