//! The tools that change what the memory holds rather than add to it: `correct` (a new
//! event that supersedes earlier ones) and `forget` (erasure). Kept apart from the everyday
//! tools of [`super::tools`]. Over HTTP only an `admin` token may call them: a `read` or
//! `write` token gets a tool error, and the attempt is recorded on the ledger as a
//! `violation` event, as the write policy records a refused write ([`refuse`]).

use super::tokens::Caller;
use super::tools::{check_text, event_json, fail, Config, Spec, ToolError, ToolName};
use super::{MAX_TEXT, REMEMBER_KINDS};
use crate::event::{Clock, Kind, NewEvent};
use crate::projection::supersession;
use crate::session::{self, forget};
use crate::store::log::SessionWriter;
use crate::store::{EventLog, Violation};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The admin tools.
pub const TOOLS: [ToolName; 2] = [ToolName::Correct, ToolName::Forget];

/// Whether `tool` is an admin tool.
pub fn is_admin(tool: ToolName) -> bool {
    TOOLS.contains(&tool)
}

/// The tools of this module, in the order they are listed.
pub fn specs() -> Vec<Spec> {
    vec![correct_spec(), forget_spec()]
}

fn forget_spec() -> Spec {
    Spec {
        name: ToolName::Forget,
        title: "Forget",
        description: "Erase events from memory: by ids, or a selection (query with min_score, concept, source, range FROM..TO). Each event's text leaves the ledger and every index, an erasure event records it, and verification still holds. dry_run lists what would go and writes nothing; with_quotes erases the later reflections and summaries that quote them too.",
        schema: json!({
            "type": "object",
            "properties": {
                "ids": {"type": "array", "description": "Event ids to erase", "items": {"type": "integer", "minimum": 1}},
                "query": {"type": "string", "description": "Erase what recall finds for this text (needs min_score)", "minLength": 1, "maxLength": MAX_TEXT},
                "min_score": {"type": "number", "description": "The lowest fused recall score taken with query (one source's best match scores 1/61 = 0.0164)"},
                "concept": {"type": "string", "description": "Erase the events bound to this concept token"},
                "source": {"type": "string", "description": "Erase the events whose meta.source is this actor"},
                "range": {"type": "string", "description": "Erase the events of FROM..TO (RFC 3339 times or YYYY-MM-DD dates)"},
                "reason": {"type": "string", "description": "Why (kept in each erasure event)", "minLength": 1},
                "with_quotes": {"type": "boolean", "description": "Also erase the later events that quote them"},
                "dry_run": {"type": "boolean", "description": "List what would be erased; write nothing"},
            },
            "required": ["reason"],
            "additionalProperties": false,
        }),
        writes: true,
    }
}

fn correct_spec() -> Spec {
    Spec {
        name: ToolName::Correct,
        title: "Correct a memory",
        description: "Replace what earlier events said with a new text: appends it with meta.supersedes naming them (the old events stay on the ledger as history; recall puts the new one first and labels the old ones superseded). kind defaults to the first replaced event's kind when it is a message, else reflection; returns the appended event.",
        schema: json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "What is true now, verbatim", "minLength": 1, "maxLength": MAX_TEXT},
                "supersedes": {"type": "array", "description": "Ids of the events it replaces", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
                "kind": {"type": "string", "description": "reflection, user_message or assistant_message", "enum": REMEMBER_KINDS},
            },
            "required": ["text", "supersedes"],
            "additionalProperties": false,
        }),
        writes: true,
    }
}

/// The arguments of `correct`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorrectArgs {
    text: String,
    supersedes: Vec<i64>,
    kind: Option<String>,
}

/// `correct`: appends `text` as an event whose `meta.supersedes` names the replaced events,
/// in one write transaction (the ids are checked there: earlier events, none repeated).
pub fn correct(cfg: &Config, a: CorrectArgs, source: &str) -> Result<Value, ToolError> {
    correct_on(&mut cfg.writer()?, &cfg.clock, a, source)
}

/// `correct` on the ledger `w`.
fn correct_on<W: SessionWriter>(
    w: &mut W,
    clock: &Clock,
    a: CorrectArgs,
    source: &str,
) -> Result<Value, ToolError> {
    check_text("text", &a.text)?;
    if a.supersedes.is_empty() {
        return fail("supersedes must name at least one event");
    }
    let event = session::append_built(w, clock, &mut |tx| {
        let kind = match correction_kind(tx, a.kind.as_deref(), &a.supersedes) {
            Ok(kind) => kind,
            Err(why) => return Ok(Err(why)),
        };
        let mut meta = Map::new();
        meta.insert("source".into(), source.into());
        match kind {
            Kind::UserMessage => meta.insert("role".into(), "user".into()),
            Kind::AssistantMessage => meta.insert("role".into(), "assistant".into()),
            _ => None,
        };
        meta.insert(supersession::KEY.into(), json!(a.supersedes));
        Ok(NewEvent::new(kind, a.text.as_str(), meta).map_err(ToolError::from))
    })??;
    Ok(json!({"event": event_json(&event), "supersedes": a.supersedes}))
}

/// The kind `correct` writes: the one asked for, else the first replaced event's kind when it
/// is a message, else `reflection`.
fn correction_kind<R: EventLog + ?Sized>(
    r: &R,
    asked: Option<&str>,
    supersedes: &[i64],
) -> Result<Kind, ToolError> {
    match asked {
        Some(k) if REMEMBER_KINDS.contains(&k) => Ok(Kind::from(k)),
        Some(k) => fail(format!(
            "correct writes only {} (not '{k}')",
            REMEMBER_KINDS.join(", ")
        )),
        None => Ok(match supersedes.first().map(|&id| r.get(id)).transpose()? {
            Some(Some(e)) if crate::event::MESSAGE_KINDS.contains(&e.kind.as_str()) => e.kind,
            _ => Kind::Reflection,
        }),
    }
}

/// A token that is not `admin` called admin tool `name`: a `violation` event records the
/// attempt (its actor the token's source, the kind it would have written, the reason), and
/// the caller gets a tool error naming it.
pub fn refuse(
    cfg: &Config,
    caller: &Caller,
    name: ToolName,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    let mut ledger = cfg.writer()?;
    let kind = match name {
        ToolName::Forget => Kind::Erasure,
        _ => {
            let ids: Vec<i64> = args
                .get("supersedes")
                .and_then(Value::as_array)
                .map(|l| l.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            let asked = args.get("kind").and_then(Value::as_str);
            correction_kind(&ledger, asked, &ids).unwrap_or(Kind::Reflection)
        }
    };
    let v = Violation {
        actor: caller.source.clone(),
        kind,
        unreadable: None,
        reason: Some(format!(
            "the tool '{name}' needs an admin token; '{}' is {}-scoped",
            caller.name,
            caller.scope.as_str()
        )),
    };
    // The write session records it, as it records every refused write.
    let recorded = session::record_violation(&mut ledger, &v, &cfg.clock)?;
    let id = match recorded {
        crate::Error::PolicyViolation { violation_id, .. } => violation_id.to_string(),
        _ => "?".into(),
    };
    fail(format!(
        "refused: '{name}' needs an admin token and '{}' is {}-scoped (nothing was changed; the attempt is recorded as violation event {id})",
        caller.name,
        caller.scope.as_str(),
    ))
}

/// The arguments of `forget`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetArgs {
    ids: Option<Vec<i64>>,
    query: Option<String>,
    min_score: Option<f64>,
    concept: Option<String>,
    source: Option<String>,
    range: Option<String>,
    reason: String,
    with_quotes: Option<bool>,
    dry_run: Option<bool>,
}

impl ForgetArgs {
    /// The selection's subjects, checked.
    fn subjects(&self) -> Result<Vec<forget::Subject>, ToolError> {
        let mut out = Vec::new();
        match (&self.query, self.min_score) {
            (Some(text), Some(min_score)) if min_score.is_finite() => {
                check_text("query", text)?;
                let text = text.clone();
                out.push(forget::Subject::Query { text, min_score });
            }
            (Some(_), _) => return fail("query needs a finite min_score"),
            (None, Some(_)) => return fail("min_score goes with query"),
            (None, None) => {}
        }
        out.extend(self.concept.clone().map(forget::Subject::Concept));
        out.extend(self.source.clone().map(forget::Subject::Source));
        if let Some(r) = &self.range {
            let (from, to) = forget::parse_range(r).map_err(ToolError)?;
            out.push(forget::Subject::Range { from, to });
        }
        Ok(out)
    }
}

/// `forget`: the events named by ids or a selection (and, `with_quotes`, their quotes)
/// erased in one transaction, each with its `erasure` event; `dry_run` lists them.
pub fn forget(cfg: &Config, a: ForgetArgs, source: &str) -> Result<Value, ToolError> {
    let subjects = a.subjects()?;
    let ids = a.ids.clone().unwrap_or_default();
    if subjects.is_empty() && ids.is_empty() {
        return fail("forget needs ids or a selection (query, concept, source, range)");
    }
    let reason = check_text("reason", &a.reason)?;
    let mut ledger = cfg.writer()?;
    let mut selected = cfg.with_projections(&ledger, |p| {
        ledger.in_snapshot(|l| forget::select(l, p, &subjects))
    })??;
    for id in ids {
        selected.entry(id).or_insert_with(|| "id".into());
    }
    let quotes = forget::quotes(&ledger, &selected)?;
    let quoted: Vec<i64> = quotes.values().flatten().copied().collect();
    let with_quotes = a.with_quotes.unwrap_or(false);
    if with_quotes {
        for q in &quoted {
            selected.entry(*q).or_insert_with(|| "quote".into());
        }
    }
    let targets: Vec<i64> = selected.keys().copied().collect();
    let mut quoted_by = if with_quotes { vec![] } else { quoted };
    quoted_by.sort_unstable();
    quoted_by.dedup();
    if a.dry_run.unwrap_or(false) || targets.is_empty() {
        let mut events = Vec::with_capacity(targets.len());
        for (&id, why) in &selected {
            if let Some(e) = ledger.get(id)? {
                events.push(
                    json!({"id": id, "kind": e.kind, "ts": e.ts, "content": e.content, "why": why}),
                );
            }
        }
        return Ok(
            json!({"dry_run": a.dry_run.unwrap_or(false), "would_erase": events, "quoted_by": quoted_by}),
        );
    }
    // `targets` holds the quotes already, when they were asked for.
    let erased = session::erase(&mut ledger, &targets, false, reason, source, &cfg.clock)?;
    let events: Vec<Value> = erased.events.iter().map(event_json).collect();
    Ok(json!({"erased": targets, "quoted_by": quoted_by, "erasures": events}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::Memory;

    fn clock() -> Clock {
        Clock::pinned("2025-11-24T05:55:41.123456Z").unwrap()
    }

    fn said(m: &mut Memory, kind: Kind, text: &str) -> i64 {
        let ev = NewEvent::new(kind, text, Map::new()).unwrap();
        session::append(m, &ev, &clock()).unwrap().id
    }

    fn args(text: &str, supersedes: Vec<i64>, kind: Option<&str>) -> CorrectArgs {
        CorrectArgs {
            text: text.into(),
            supersedes,
            kind: kind.map(str::to_string),
        }
    }

    /// `correct` on the in-memory log: the kind of the first replaced message, its role, and
    /// `meta.supersedes` naming what it replaces.
    #[test]
    fn a_correction_takes_the_replaced_messages_kind() {
        let mut m = Memory::new();
        let old = said(&mut m, Kind::UserMessage, "I live in Paris");
        let a = args("I live in Lyon", vec![old], None);
        let done = correct_on(&mut m, &clock(), a, "mcp").unwrap();
        assert_eq!(done["event"]["kind"], "user_message");
        assert_eq!(done["event"]["meta"]["role"], "user");
        assert_eq!(done["event"]["meta"]["supersedes"], json!([old]));
        let note = said(&mut m, Kind::Reflection, "a note");
        let a = args("better", vec![note], None);
        let done = correct_on(&mut m, &clock(), a, "mcp").unwrap();
        assert_eq!(done["event"]["kind"], "reflection");
    }

    /// Ids that are not earlier events, or a kind `correct` does not write, are errors and
    /// write nothing.
    #[test]
    fn a_bad_correction_writes_nothing() {
        let mut m = Memory::new();
        let old = said(&mut m, Kind::UserMessage, "x");
        let later = correct_on(&mut m, &clock(), args("y", vec![old + 5], None), "mcp");
        assert!(later.is_err());
        let kind = correct_on(
            &mut m,
            &clock(),
            args("y", vec![old], Some("config")),
            "mcp",
        );
        let kind = kind.unwrap_err().0;
        assert!(kind.starts_with("correct writes only"), "{kind}");
        assert_eq!(m.max_id().unwrap(), old);
    }
}
