//! The prompt a turn sends, and the same prompt rebuilt from the ledger alone (docs/turn.md,
//! "Reproducible prompts").
//!
//! A turn's prompt is the system prompt (the context block and the rules), the user's message
//! and the recent history. The context block is a function of the projections as of the turn's
//! first write (the user's message and its embedding), the message, and what retrieval chose,
//! which the turn's `retrieval_selection` records in order. So nothing but the ledger is needed
//! to rebuild it: [`rebuild`] folds the state as of that write, reads the recorded selection and
//! the history, renders, and hashes; the assistant message's `prompt_sha256` says whether that is
//! what was sent. Replies carry [`PROMPT_FORMAT`] (`meta.prompt_format`) and the user message
//! they answer (`meta.reply_to`): a reply without them, or of another format, is named as such
//! rather than reported as a difference.

use super::render;
use super::select::{self, Selection, Via};
use crate::canon;
use crate::event::{Event, Kind};
use crate::projection::state::Projections;
use crate::store::{Filter, Indexes};
use serde_json::{json, Value};

/// The prompt format this build renders. Bump it whenever the context block, the rules, the
/// history or the digest change, so that older turns are named rather than misreported (or,
/// when the change is one this build can undo, rebuilt: see [`REBUILT_FORMATS`]).
pub const PROMPT_FORMAT: i64 = 5;
/// The prompt formats this build rebuilds: 3 differs from 4 in the rules' first sentences only
/// (`context::render::rules`); 5 labels superseded evidence and puts it after what is
/// believed now (`context::render::SUPERSEDED_FROM`), and is 4 on a ledger without
/// corrections.
pub const REBUILT_FORMATS: [i64; 3] = [3, 4, 5];
/// How many of the newest messages every prompt carries as chat history (3 exchanges).
pub const HISTORY_MESSAGES: usize = 6;
/// The most characters of history a prompt carries.
pub const HISTORY_CHARS: usize = 6_000;
/// How far after a reply its `retrieval_selection` may be (they are written in one
/// transaction, a few events apart).
pub const SELECTION_REACH: i64 = 64;

/// A prompt as sent: the system prompt, the chat history (`(role, text)`, oldest first) and the
/// user's message.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The system prompt (context block, blank line, rules).
    pub system: String,
    /// The recent messages, oldest first.
    pub history: Vec<(String, String)>,
    /// The user's message.
    pub user: String,
}

impl Prompt {
    /// `prompt_sha256`: the sha256 of the canonical JSON `{"system","user"}`, with `"history"`
    /// when there is one.
    pub fn sha256(&self) -> String {
        use sha2::Digest as _;
        format!("{:x}", sha2::Sha256::digest(self.canonical()))
    }

    /// The canonical JSON that [`Prompt::sha256`] hashes, written straight from the strings
    /// (keys in code-point order: `history`, `system`, `user`; no value tree).
    fn canonical(&self) -> Vec<u8> {
        let texts = self.system.len() + self.user.len();
        let history: usize = self
            .history
            .iter()
            .map(|(r, t)| r.len() + t.len() + 6)
            .sum();
        let mut out = Vec::with_capacity(texts + history + texts / 8 + 64);
        out.push(b'{');
        if !self.history.is_empty() {
            out.extend_from_slice(b"\"history\":[");
            for (i, (role, text)) in self.history.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.push(b'[');
                canon::write_str(&mut out, role);
                out.push(b',');
                canon::write_str(&mut out, text);
                out.push(b']');
            }
            out.extend_from_slice(b"],");
        }
        out.extend_from_slice(b"\"system\":");
        canon::write_str(&mut out, &self.system);
        out.extend_from_slice(b",\"user\":");
        canon::write_str(&mut out, &self.user);
        out.push(b'}');
        out
    }

    /// The prompt as one JSON object (what `pmm-replay --prompt` prints).
    pub fn to_json(&self) -> Value {
        json!({"system": self.system, "history": self.history, "user": self.user})
    }
}

/// The history messages as `(role, text)` pairs.
pub fn history_pairs(history: &[Event]) -> Vec<(String, String)> {
    history
        .iter()
        .map(|e| {
            let role = if e.kind == Kind::UserMessage {
                "user"
            } else {
                "assistant"
            };
            (role.to_string(), e.content.clone())
        })
        .collect()
}

/// Renders the prompt for the user message `user` from the projections `p` (as of the turn's
/// first write), what retrieval chose, and the history.
pub fn render(p: &Projections, sel: &Selection, user: &str, history: &[Event]) -> Prompt {
    render_of(p, sel, user, history, PROMPT_FORMAT)
}

/// [`mod@render`] as prompt format `format` renders it (one of [`REBUILT_FORMATS`]).
pub fn render_of(
    p: &Projections,
    sel: &Selection,
    user: &str,
    history: &[Event],
    format: i64,
) -> Prompt {
    let context = render::context_block_of(p, p.mirror.last_event_id, sel, user, format);
    Prompt {
        system: render::system_prompt_of(&context, format),
        history: history_pairs(history),
        user: user.to_string(),
    }
}

/// Why a turn's prompt could not be rebuilt.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RebuildError {
    /// The event is neither a turn's reply nor a message a reply answers.
    #[error("event {0} is not a turn's user or assistant message")]
    NotATurn(i64),
    /// The reply was written by an older pmm (or another program): named, not checked.
    #[error("event {id} was written with {format}, not prompt format 3 to {PROMPT_FORMAT}: its prompt cannot be rebuilt by this version")]
    OtherFormat {
        /// The reply.
        id: i64,
        /// The format it names (or that it names none).
        format: String,
    },
    /// Something the prompt was built from is not in the ledger.
    #[error("event {id}: {what}")]
    Missing {
        /// The reply.
        id: i64,
        /// What is missing.
        what: String,
    },
}

/// What a reply says about its prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// The `assistant_message`'s id.
    pub reply: i64,
    /// The `user_message` it answers.
    pub user_id: i64,
    /// The `prompt_sha256` it records.
    pub recorded: String,
    /// The prompt format it names (one of [`REBUILT_FORMATS`]).
    pub format: i64,
}

/// The turn `id` names (its `assistant_message`, or the user message a reply answers), checked
/// to be of a format this build rebuilds.
pub fn turn_of<R: Indexes>(r: &R, id: i64) -> crate::Result<Result<Turn, RebuildError>> {
    let Some(ev) = r.get(id)? else {
        return Ok(Err(RebuildError::NotATurn(id)));
    };
    let reply = if ev.kind == Kind::AssistantMessage {
        Some(ev)
    } else if ev.kind == Kind::UserMessage {
        reply_to(r, id)?
    } else {
        None
    };
    Ok(match reply {
        Some(reply) => turn_of_reply(&reply),
        None => Err(RebuildError::NotATurn(id)),
    })
}

/// The reply that answers user message `user_id`: the first `assistant_message` after it
/// whose `reply_to` names it (turns write it within a few events, other writers aside).
fn reply_to<R: Indexes>(r: &R, user_id: i64) -> crate::Result<Option<Event>> {
    let mut found = None;
    r.scan(
        &Filter {
            since: Some(user_id + 1),
            until: Some(user_id.saturating_add(SELECTION_REACH * 16)),
            kinds: vec![Kind::AssistantMessage],
        },
        &mut |e| {
            let named = e.meta_map().ok().and_then(|m| m.get("reply_to")?.as_i64());
            if named == Some(user_id) {
                found = Some(e);
                return Ok(false);
            }
            Ok(true)
        },
    )?;
    Ok(found)
}

/// A reply's prompt record, if it is of a format this build rebuilds ([`REBUILT_FORMATS`]).
pub fn turn_of_reply(reply: &Event) -> Result<Turn, RebuildError> {
    let m = reply.meta_map().unwrap_or_default();
    let id = reply.id;
    let format = m.get("prompt_format").and_then(Value::as_i64);
    let (Some(user_id), Some(recorded)) = (
        m.get("reply_to").and_then(Value::as_i64),
        m.get("prompt_sha256").and_then(Value::as_str),
    ) else {
        return Err(RebuildError::OtherFormat {
            id,
            format: "no prompt format (a reply without reply_to and prompt_sha256)".into(),
        });
    };
    let Some(format) = format.filter(|f| REBUILT_FORMATS.contains(f)) else {
        return Err(RebuildError::OtherFormat {
            id,
            format: format.map_or("no prompt format".into(), |f| format!("prompt format {f}")),
        });
    };
    let recorded = recorded.to_string();
    Ok(Turn {
        reply: id,
        user_id,
        recorded,
        format,
    })
}

/// The last event of the turn's first write: the user message, or its `embedding_add` when
/// one follows it (they are written in one transaction).
pub fn head_of<R: Indexes>(r: &R, user_id: i64) -> crate::Result<i64> {
    Ok(head_given(user_id, r.get_shared(user_id + 1)?.as_deref()))
}

/// [`head_of`] given the event after the user message (`next`, id `user_id + 1`; `None`: there
/// is none), for a caller that has it at hand.
pub fn head_given(user_id: i64, next: Option<&Event>) -> i64 {
    match next {
        Some(e)
            if e.id == user_id + 1
                && e.kind == Kind::EmbeddingAdd
                && embedded_id(&e.content) == Some(user_id) =>
        {
            user_id + 1
        }
        _ => user_id,
    }
}

/// The `event_id` an embedding's content names: read into a field when the content has the
/// usual shape (the vector skipped, not parsed number by number), else through a `Value`.
fn embedded_id(content: &str) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct Usual {
        event_id: Option<i64>,
    }
    let usual = canon::starts_object(content)
        .then(|| serde_json::from_str::<Usual>(content).ok())
        .flatten();
    match usual {
        Some(u) => u.event_id,
        None => serde_json::from_str::<Value>(content)
            .ok()
            .and_then(|v| v.get("event_id")?.as_i64()),
    }
}

/// The selection a turn recorded: its `retrieval_selection` (`turn_id` = the reply), with the
/// selected events read back.
pub fn recorded_selection<R: Indexes>(
    r: &R,
    turn: &Turn,
) -> crate::Result<Result<Selection, RebuildError>> {
    recorded_selection_in(r, turn, None)
}

/// [`recorded_selection`], looking for the record among `nearby` when the caller has the
/// events after the reply, every one up to [`SELECTION_REACH`] ids after it, in id order
/// (others are passed over); in the ledger when `None`.
pub fn recorded_selection_in<R: Indexes>(
    r: &R,
    turn: &Turn,
    nearby: Option<&[&Event]>,
) -> crate::Result<Result<Selection, RebuildError>> {
    let id = turn.reply;
    let until = id.saturating_add(SELECTION_REACH);
    let mut record = None;
    let mut look = |e: &Event| {
        let read = Recorded::read(&e.content);
        if read.turn_id == Some(id) {
            record = Some(read);
        }
        record.is_none()
    };
    match nearby {
        Some(events) => {
            let within = |e: &&&Event| e.id > id && e.id <= until;
            let selections = events.iter().filter(within);
            for e in selections.filter(|e| e.kind == Kind::RetrievalSelection) {
                if !look(e) {
                    break;
                }
            }
        }
        None => {
            let filter = Filter {
                since: Some(id + 1),
                until: Some(until),
                kinds: vec![Kind::RetrievalSelection],
            };
            r.scan(&filter, &mut |e| Ok(look(&e)))?;
        }
    }
    let missing = |what: String| Ok(Err(RebuildError::Missing { id, what }));
    let Some(Recorded { selected, via, .. }) = record else {
        return missing("no retrieval_selection records this turn".into());
    };
    let mut events = Vec::with_capacity(selected.len());
    for &s in &selected {
        match r.get_shared(s)? {
            Some(e) => events.push(e),
            None => return missing(format!("selected event {s} is not in the ledger")),
        }
    }
    events.sort_by_key(|e| e.id);
    let scores = vec![0.0; selected.len()];
    Ok(Ok(Selection {
        selected,
        scores,
        events,
        via,
    }))
}

/// What a `retrieval_selection` records of its turn: the turn (`turn_id`), the ids selected,
/// in order, and why each was (`via`; empty for the reference's strategies). Read leniently:
/// ids that are not integers are left out, as are `via` entries that are not strings (a
/// string this version does not know is kept: [`Via::Other`]).
#[derive(Debug, Default, PartialEq)]
struct Recorded {
    turn_id: Option<i64>,
    selected: Vec<i64>,
    via: Vec<Vec<Via>>,
}

/// The usual shape of a selection's content, read with no value tree.
#[derive(serde::Deserialize)]
struct Usual {
    turn_id: Option<i64>,
    selected: Vec<i64>,
    #[serde(default)]
    via: Option<Vec<Vec<Via>>>,
}

impl Recorded {
    /// Reads a selection's content: straight into the fields when it has the usual shape,
    /// else through a `Value`, leniently (what that gives for the usual shape is the same).
    fn read(content: &str) -> Recorded {
        let usual = canon::starts_object(content)
            .then(|| serde_json::from_str::<Usual>(content).ok())
            .flatten();
        if let Some(u) = usual {
            return Recorded {
                turn_id: u.turn_id,
                selected: u.selected,
                via: u.via.unwrap_or_default(),
            };
        }
        let v: Value = serde_json::from_str(content).unwrap_or_default();
        Recorded::lenient(&v)
    }

    fn lenient(v: &Value) -> Recorded {
        let selected: Vec<i64> = v["selected"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default();
        let via: Vec<Vec<Via>> = match v.get("via").and_then(Value::as_array) {
            Some(a) => a
                .iter()
                .map(|x| {
                    x.as_array()
                        .map(|l| {
                            l.iter()
                                .filter_map(|s| s.as_str().map(Via::parse))
                                .collect()
                        })
                        .unwrap_or_default()
                })
                .collect(),
            None => Vec::new(),
        };
        Recorded {
            turn_id: v.get("turn_id").and_then(Value::as_i64),
            selected,
            via,
        }
    }
}

/// Rebuilds a turn's prompt from `p`, the projections folded up to [`head_of`] the turn.
pub fn rebuild_with<R: Indexes>(
    r: &R,
    p: &Projections,
    turn: &Turn,
) -> crate::Result<Result<Prompt, RebuildError>> {
    rebuild_with_history(r, p, turn, None, None)
}

/// [`rebuild_with`], with the turn's history when the caller has it (the newest
/// [`HISTORY_MESSAGES`] messages before the user's, oldest first; the character budget is
/// applied here), and the events after the reply ([`recorded_selection_in`]), each read from
/// the ledger when not.
pub fn rebuild_with_history<R: Indexes>(
    r: &R,
    p: &Projections,
    turn: &Turn,
    history: Option<Vec<Event>>,
    nearby: Option<&[&Event]>,
) -> crate::Result<Result<Prompt, RebuildError>> {
    let id = turn.reply;
    let user = r.get_shared(turn.user_id)?;
    let Some(user) = user.filter(|e| e.kind == Kind::UserMessage) else {
        return Ok(Err(RebuildError::Missing {
            id,
            what: format!("reply_to {} is not a user message", turn.user_id),
        }));
    };
    let sel = match recorded_selection_in(r, turn, nearby)? {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let history = match history {
        Some(recent) => select::within(recent, HISTORY_CHARS),
        None => select::history(r, user.id, HISTORY_MESSAGES, HISTORY_CHARS)?,
    };
    Ok(Ok(render_of(p, &sel, &user.content, &history, turn.format)))
}

/// Rebuilds a turn's prompt from the ledger alone (the state as of the turn, from the newest
/// projection checkpoint at or before it).
pub fn rebuild<R: Indexes>(r: &R, turn: &Turn) -> crate::Result<Result<Prompt, RebuildError>> {
    let head = head_of(r, turn.user_id)?;
    let p = crate::projection::checkpoint::project(r, Some(head), true)?.projections;
    rebuild_with(r, &p, turn)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical JSON of the value `{"system","user"[,"history"]}` (how the digest was
    /// first defined).
    fn by_value(p: &Prompt) -> Vec<u8> {
        let mut v = json!({"system": p.system, "user": p.user});
        if !p.history.is_empty() {
            v["history"] = json!(p.history);
        }
        canon::to_string(&v).unwrap().into_bytes()
    }

    /// A selection's record reads the same whether its content has the usual shape (read
    /// into fields) or not (read through a `Value`).
    #[test]
    fn selection_records_read_as_the_lenient_reading_does() {
        for content in [
            r#"{"turn_id":7,"selected":[3,1,2],"via":[["fts"],["fts","concept"],[]],"scores":[0.5,1,2]}"#,
            r#"{"turn_id":7,"selected":[3,1,2]}"#,
            r#"{"turn_id":7,"selected":[3,1,2],"via":null}"#,
            r#"{"turn_id":7,"selected":[3,1.5,2],"via":[["a",1],null]}"#,
            r#"{"turn_id":7,"turn_id":8,"selected":[1]}"#,
            r#"{"turn_id":"7","selected":[1]}"#,
            r#"{"turn_id":7.0,"selected":[-0]}"#,
            r#"{"turn_id":7}"#,
            r#"{"selected":[1],"via":[["x"]]}"#,
            r#"[1,2]"#,
            r#"[7,[1,2],null]"#,
            r#" [7,[1,2]]"#,
            r#"not json"#,
        ] {
            let v: Value = serde_json::from_str(content).unwrap_or_default();
            assert_eq!(Recorded::read(content), Recorded::lenient(&v), "{content}");
        }
    }

    /// An embedding names the event the `Value` reading says it names, whatever its shape.
    #[test]
    fn embedded_ids_read_as_a_value_reads_them() {
        for content in [
            r#"{"dims":64,"event_id":12,"vector":[1,-2,3]}"#,
            r#"{"event_id":12,"event_id":13}"#,
            r#"{"event_id":"12"}"#,
            r#"{"event_id":12.0}"#,
            r#"{"event_id":null}"#,
            r#"{"dims":64}"#,
            r#"[12]"#,
            r#"nope"#,
        ] {
            let by_value = serde_json::from_str::<Value>(content)
                .ok()
                .and_then(|v| v.get("event_id")?.as_i64());
            assert_eq!(embedded_id(content), by_value, "{content}");
        }
    }

    /// The digest's bytes, written from the strings, are the canonical JSON of the value.
    #[test]
    fn canonical_bytes_are_those_of_the_value() {
        let odd = "quote \" back \\ tab \t nl \n é 𝄞 \u{7f} \u{1}";
        let history = vec![
            ("user".to_string(), format!("hi {odd}")),
            ("assistant".to_string(), String::new()),
        ];
        for history in [Vec::new(), history] {
            let p = Prompt {
                system: format!("## Concepts\n- x {odd}"),
                history,
                user: odd.to_string(),
            };
            assert_eq!(p.canonical(), by_value(&p));
        }
    }
}
