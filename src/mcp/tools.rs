//! The tools of `pmm-mcp` as plain functions: JSON arguments in, a JSON value or a
//! [`ToolError`] out. No protocol here; [`super::server`] puts these behind MCP.
//!
//! Each write opens a writer for itself and is one `BEGIN IMMEDIATE` transaction that ends
//! before the call returns, so no lock is held between calls and other programs write in
//! between. Reads take a reader connection kept from an earlier call (`Config::reader`: no
//! transaction stays open on it, and SQLite checks its page cache against the file at each
//! read), which reads the file memory-mapped, so a call does not copy the same pages from the
//! file again. The projections are kept in memory
//! between calls and brought up to the ledger's head at each call (the events since, folded),
//! so a call costs the events appended since the last one, not a replay; after an erasure
//! they, and the vector packs kept, are built anew, so no call answers with erased text.

use super::tokens::{Caller, Scope};
use super::{
    DEFAULT_LIMIT, MAX_BUDGET, MAX_K, MAX_LIMIT, MAX_REPLY_CONTENT, MAX_TEXT, REMEMBER_KINDS,
    SOURCE,
};
use crate::event::vocab::vocabulary;
use crate::event::{Clock, Event, Kind, NewEvent};
use crate::projection::checkpoint;
use crate::projection::mirror::{self, commitment_cid};
use crate::projection::state::Projections;
use crate::recall::{self, Query};
use crate::session;
use crate::store::log::SessionWriter;
use crate::store::{EventLog, Filter, Indexes, Ledger, RECALLED_KINDS};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::Mutex;

/// Why a tool call failed, in words a model can act on. It becomes an `isError` tool result;
/// the server goes on serving.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl From<crate::Error> for ToolError {
    fn from(e: crate::Error) -> Self {
        ToolError(e.to_string())
    }
}

impl From<crate::event::EventError> for ToolError {
    fn from(e: crate::event::EventError) -> Self {
        ToolError(e.to_string())
    }
}

pub(crate) fn fail<T>(msg: impl Into<String>) -> Result<T, ToolError> {
    Err(ToolError(msg.into()))
}

/// What the server serves and how.
pub struct Config {
    /// The ledger.
    pub db: PathBuf,
    /// Only the reading tools (`recall`, `state`, `events`, `verify`).
    pub read_only: bool,
    /// How long a write waits for another writer's lock, in milliseconds.
    pub busy_ms: u64,
    /// Where timestamps come from.
    pub clock: Clock,
    /// The embedding model of the dense recall source, if any (the `recall` tool embeds its
    /// query with it).
    pub embedder: Option<crate::llm::embed::Shared>,
    /// The projections as of the last call (see the module docs).
    cache: Mutex<Option<std::sync::Arc<Projections>>>,
    /// The vector packs, kept between tool calls.
    packs: std::sync::Arc<Mutex<crate::store::vectors::PackCache>>,
    /// Readers kept between calls ([`Config::reader`]), with the file each was opened on.
    readers: Mutex<Vec<(Ledger, Option<FileId>)>>,
}

/// How many readers [`Config::reader`] keeps between calls at most: one for each session
/// calling at once, for the few sessions one server serves together.
const KEPT_READERS: usize = 8;

/// How much of the ledger file a kept reader reads through memory-mapped I/O
/// ([`crate::store::sqlite::Ledger::map_pages`]): its pages then come from the OS's page
/// cache, shared by every reader of every process, instead of being copied into each
/// reader's own page cache (a fifth of a recall's CPU). 8 minimal clients at 10^5 events:
/// 2.3 instead of 3.9 ms of the HTTP server's CPU a recall, and some 50 % more recalls a
/// second over both transports (docs/mcp.md, Session 24). The mapped pages count in the
/// process's RSS as file pages (`RssFile`), which the kernel may drop at any time.
const MAPPED_BYTES: u64 = 1 << 30;

/// Whether a reader is kept between calls: not one opened `immutable` (it would not see later
/// writes), nor a PostgreSQL ledger's cache.
fn kept_kind(ledger: &Ledger) -> bool {
    !ledger.is_at_rest() && ledger.url().is_none()
}

/// A file's device and inode: a ledger replaced by another file (a restore by `mv`) is not
/// read through a connection kept on the old one.
type FileId = (u64, u64);

/// The ledger read for one call ([`Config::reader`]); kept for the next call when dropped.
pub(crate) struct Reader<'a> {
    cfg: &'a Config,
    kept: Option<(Ledger, Option<FileId>)>,
    /// Whether it goes back to the pool when dropped.
    keep: bool,
}

impl std::ops::Deref for Reader<'_> {
    type Target = Ledger;
    fn deref(&self) -> &Ledger {
        &self
            .kept
            .as_ref()
            .expect("a reader holds its ledger until dropped")
            .0
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if let Some(kept) = self.kept.take().filter(|_| self.keep) {
            let mut readers = self.cfg.readers.lock().unwrap_or_else(|e| e.into_inner());
            if readers.len() < KEPT_READERS {
                readers.push(kept);
            }
        }
    }
}

impl Config {
    /// A server over `db`.
    pub fn new(db: PathBuf, read_only: bool, busy_ms: u64, clock: Clock) -> Config {
        Config {
            db,
            read_only,
            busy_ms,
            clock,
            embedder: None,
            cache: Mutex::new(None),
            packs: Default::default(),
            readers: Mutex::new(Vec::new()),
        }
    }

    /// A reader of the ledger file for one call: one kept from an earlier call when there is
    /// one, else a new one, which reads the first [`MAPPED_BYTES`] of the file memory-mapped.
    /// A kept connection keeps its page cache, which SQLite checks against the file at each
    /// read (a new connection read every page of a recall from the file again: a fifth of a
    /// recall's CPU at 10^5 events), and its map. Not kept: a ledger opened `immutable` ("at rest", which would not
    /// see later writes), one whose path now names another file, and a PostgreSQL ledger's
    /// cache (its server connection must not be dropped where the server's async runtime
    /// runs, as a kept one would be when the server ends).
    pub(crate) fn reader(&self) -> Result<Reader<'_>, ToolError> {
        let now = crate::store::file_identity(&self.db);
        let kept = self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let kept = match kept {
            Some((ledger, id)) if id.is_some() && id == now => (ledger, id),
            _ => {
                let mut ledger = Ledger::open_reader(&self.db)?;
                ledger.keep_vector_packs(self.packs.clone());
                if kept_kind(&ledger) {
                    ledger.file().map_pages(MAPPED_BYTES)?;
                }
                (ledger, now)
            }
        };
        Ok(Reader {
            cfg: self,
            keep: kept_kind(&kept.0),
            kept: Some(kept),
        })
    }

    pub(crate) fn writer(&self) -> Result<Ledger, ToolError> {
        Ok(Ledger::open_writer(&self.db, self.busy_ms)?)
    }

    /// Runs `f` on the projections as of `r`'s head: the cached ones brought up to date
    /// ([`checkpoint::catch_up`], which projects them anew after an erasure) when they still
    /// describe this ledger (their last event is still there with the same hash), else a
    /// projection from the newest checkpoint.
    ///
    /// The lock is held only while they are brought up to date; `f` runs on a shared copy, so
    /// the sessions of one HTTP server recall at the same time. Folding copies them only when
    /// the ledger grew while another call still reads the old ones.
    pub fn with_projections<R: EventLog + checkpoint::Replay + ?Sized, T>(
        &self,
        r: &R,
        f: impl FnOnce(&Projections) -> T,
    ) -> crate::Result<T> {
        let p = {
            let mut guard = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            // Taken out while it is folded: a failure leaves no half-folded cache behind.
            let cached = guard.take();
            let head = r.max_id()?;
            let usable = match &cached {
                Some(p) if p.mirror.last_event_id > 0 && p.mirror.last_event_id <= head => {
                    r.get(p.mirror.last_event_id)?.and_then(|e| e.hash) == p.mirror.last_hash
                }
                _ => false,
            };
            let p = match cached {
                // Nothing since: an erasure would be an event after the last one folded.
                Some(p) if usable && p.mirror.last_event_id == head => p,
                Some(mut p) if usable => {
                    // An erasure since the last call makes it a projection anew.
                    checkpoint::catch_up(r, std::sync::Arc::make_mut(&mut p), Some(head))?;
                    p
                }
                _ => std::sync::Arc::new(checkpoint::project(r, Some(head), true)?.projections),
            };
            *guard = Some(p.clone());
            p
        };
        Ok(f(&p))
    }
}

/// One tool: its name, what it does (one line a model can act on), its input schema, and
/// whether it writes.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The tool's name.
    pub name: ToolName,
    /// A short title.
    pub title: &'static str,
    /// What it does, for the model.
    pub description: &'static str,
    /// The JSON Schema of its arguments.
    pub schema: Value,
    /// True for the tools that append to the ledger (refused under `--read-only`).
    pub writes: bool,
}

vocabulary! {
    /// The names of the MCP server's tools, declared once: [`specs`] lists a spec for each and
    /// [`call_as`] dispatches on them with an exhaustive match, so that a tool cannot be listed
    /// without being callable, nor called without being listed (a test checks the specs).
    pub enum ToolName {
        /// Search memory.
        Recall = "recall",
        /// Add a message or a note.
        Remember = "remember",
        /// Open a commitment.
        Commit = "commit",
        /// Close a commitment.
        Close = "close",
        /// The projected state.
        State = "state",
        /// Read events.
        Events = "events",
        /// An inclusion proof.
        Prove = "prove",
        /// Verify the chain.
        Verify = "verify",
        /// Supersede events with a new text (admin).
        Correct = "correct",
        /// Erase events (admin).
        Forget = "forget",
    }
}

/// Every tool, in the order they are listed.
pub fn specs() -> Vec<Spec> {
    [
        memory_specs(),
        commitment_specs(),
        reading_specs(),
        audit_specs(),
        super::admin::specs(),
    ]
    .concat()
}

/// The tools that search and add to memory: `recall`, `remember`.
fn memory_specs() -> Vec<Spec> {
    let recalled: Vec<&str> = RECALLED_KINDS.to_vec();
    vec![
        Spec {
            name: ToolName::Recall,
            title: "Recall from memory",
            description: "Search the agent's whole memory (the pmm ledger) for events relevant to a query; returns them best first, each with its score and via (why it was recalled: fts, dense, neighbour-of:ID, concept:TOKEN, thread:CID, fact:TYPE=VALUE, when:DAY, speaker:NAME, corrects:ID); an event a later one corrected comes after it, with superseded_by {by, source, ts, current}.",
            schema: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to recall: words or a question", "minLength": 1, "maxLength": MAX_TEXT},
                    "k": {"type": "integer", "description": "At most this many events", "minimum": 1, "maximum": MAX_K},
                    "budget": {"type": "integer", "description": "Characters of event text to return at most (default 8000)", "minimum": 1, "maximum": MAX_BUDGET},
                    "kinds": {"type": "array", "description": "Only events of these kinds", "items": {"type": "string", "enum": recalled}},
                    "current": {"type": "boolean", "description": "Only what is believed now: leave out events a later event corrected (default false: each comes after its correction, with superseded_by)"},
                },
                "required": ["query"],
                "additionalProperties": false,
            }),
            writes: false,
        },
        Spec {
            name: ToolName::Remember,
            title: "Remember",
            description: "Append a note (kind reflection, the default) or a message (user_message, assistant_message) to the agent's memory so it can be recalled later; returns the appended event.",
            schema: json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "What to remember, verbatim", "minLength": 1, "maxLength": MAX_TEXT},
                    "kind": {"type": "string", "description": "reflection (a note, the default), user_message or assistant_message", "enum": REMEMBER_KINDS},
                    "supersedes": {"type": "array", "description": "Ids of earlier events this one corrects: recall shows them after it, labelled superseded", "items": {"type": "integer", "minimum": 1}},
                },
                "required": ["text"],
                "additionalProperties": false,
            }),
            writes: true,
        },
    ]
}

/// The tools that open and close commitments: `commit`, `close`.
fn commitment_specs() -> Vec<Spec> {
    vec![
        Spec {
            name: ToolName::Commit,
            title: "Open a commitment",
            description: "Open a commitment (something the agent undertakes to do) in its memory; returns its cid (use it with close) and the commitment_open event.",
            schema: json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "What the agent commits to", "minLength": 1, "maxLength": MAX_TEXT},
                },
                "required": ["text"],
                "additionalProperties": false,
            }),
            writes: true,
        },
        Spec {
            name: ToolName::Close,
            title: "Close a commitment",
            description: "Close an open commitment by its cid (see state's open_commitments); fails when no open commitment has that cid.",
            schema: json!({
                "type": "object",
                "properties": {
                    "cid": {"type": "string", "description": "The commitment's cid (8 hex digits, or mc_… for internal goals)", "minLength": 1, "maxLength": 256},
                },
                "required": ["cid"],
                "additionalProperties": false,
            }),
            writes: true,
        },
    ]
}

/// The tools that read state and events: `state`, `events`.
fn reading_specs() -> Vec<Spec> {
    vec![
        Spec {
            name: ToolName::State,
            title: "Identity, commitments, self-model",
            description: "The agent's state as of the newest event (or event at): identity, open commitments, self-model (rsm), thresholds, retrieval config, last_event_id and last_hash.",
            schema: json!({
                "type": "object",
                "properties": {
                    "at": {"type": "integer", "description": "The state as of this event id", "minimum": 1},
                },
                "additionalProperties": false,
            }),
            writes: false,
        },
        Spec {
            name: ToolName::Events,
            title: "Read events",
            description: "Read the ledger's events in id order: since and until are event ids (inclusive), kind filters by kind, limit caps the count (default 100, at most 10000).",
            schema: json!({
                "type": "object",
                "properties": {
                    "since": {"type": "integer", "description": "Only events with id >= since", "minimum": 0},
                    "until": {"type": "integer", "description": "Only events with id <= until", "minimum": 0},
                    "kind": {"description": "Only events of this kind (or of these kinds)", "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                    "limit": {"type": "integer", "description": "At most this many events (default 100)", "minimum": 1, "maximum": MAX_LIMIT},
                },
                "additionalProperties": false,
            }),
            writes: false,
        },
    ]
}

/// The tools that prove and verify: `prove`, `verify`.
fn audit_specs() -> Vec<Spec> {
    vec![
        Spec {
            name: ToolName::Prove,
            title: "Prove an event is in memory",
            description: "An RFC 9162 inclusion proof that event id is in the ledger's Merkle tree (of size events, default all): leaf, path and root, checkable offline with pmm-verify --check-proof or any RFC 9162 verifier, against a root or a signed checkpoint.",
            schema: json!({
                "type": "object",
                "properties": {
                    "id": {"type": "integer", "description": "The event to prove", "minimum": 1},
                    "size": {"type": "integer", "description": "The tree size to prove it in (default: the whole ledger; use a signed checkpoint's size)", "minimum": 1},
                },
                "required": ["id"],
                "additionalProperties": false,
            }),
            writes: false,
        },
        Spec {
            name: ToolName::Verify,
            title: "Verify the ledger",
            description: "Verify the ledger's hash chain (every hash, link and id; with deep=true also every derived event); returns the summary (ok, counts, last_hash) and the first findings.",
            schema: json!({
                "type": "object",
                "properties": {
                    "deep": {"type": "boolean", "description": "Also recompute every derived event (slower)"},
                },
                "additionalProperties": false,
            }),
            writes: false,
        },
    ]
}

/// Calls tool `name` with `args`. An unknown name, bad arguments, a refused or failed write:
/// all are [`ToolError`]s, and nothing of a failed write is committed.
pub fn call(cfg: &Config, name: &str, args: Map<String, Value>) -> Result<Value, ToolError> {
    call_as(cfg, None, name, args)
}

/// [`call`] on behalf of `caller` (a token of `pmm-mcp --http`): a read-scoped one may not
/// write, and writes record its source instead of plain `mcp`.
pub fn call_as(
    cfg: &Config,
    caller: Option<&Caller>,
    name: &str,
    args: Map<String, Value>,
) -> Result<Value, ToolError> {
    let Some((tool, spec)) = ToolName::parse(name)
        .and_then(|tool| Some((tool, specs().into_iter().find(|s| s.name == tool)?)))
    else {
        return fail(format!("unknown tool '{name}'"));
    };
    if spec.writes && cfg.read_only {
        return fail(format!(
            "refused: pmm-mcp runs --read-only and '{name}' writes to the ledger (nothing was written)"
        ));
    }
    if let Some(c) = caller.filter(|c| super::admin::is_admin(tool) && c.scope != Scope::Admin) {
        return super::admin::refuse(cfg, c, tool, &args);
    }
    if let Some(c) = caller.filter(|c| spec.writes && c.scope == Scope::Read) {
        return fail(format!(
            "refused: the token '{}' is read-scoped and '{name}' writes to the ledger (nothing was written)",
            c.name
        ));
    }
    let source = caller.map_or(SOURCE, |c| c.source.as_str());
    match tool {
        ToolName::Recall => recall_tool(cfg, parse(name, args)?),
        ToolName::Remember => remember(cfg, parse(name, args)?, source),
        ToolName::Commit => commit(cfg, parse(name, args)?, source),
        ToolName::Close => close(cfg, parse(name, args)?, source),
        ToolName::Correct => super::admin::correct(cfg, parse(name, args)?, source),
        ToolName::Forget => super::admin::forget(cfg, parse(name, args)?, source),
        ToolName::State => state(cfg, parse(name, args)?),
        ToolName::Events => events(cfg, parse(name, args)?),
        ToolName::Prove => {
            let a: ProveArgs = parse(name, args)?;
            let ledger = cfg.reader()?;
            let proof = crate::audit::prove::inclusion(&ledger, a.id, a.size, "size")?;
            serde_json::to_value(&proof).map_err(|e| ToolError(format!("prove: {e}")))
        }
        ToolName::Verify => {
            let a: VerifyArgs = parse(name, args)?;
            super::verify::verify(&cfg.db, a.deep.unwrap_or(false))
        }
    }
}

pub(crate) fn parse<T: DeserializeOwned>(
    tool: &str,
    args: Map<String, Value>,
) -> Result<T, ToolError> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| ToolError(format!("invalid arguments for {tool}: {e}")))
}

/// A text argument: not blank, at most [`MAX_TEXT`] bytes.
pub(crate) fn check_text<'a>(what: &str, text: &'a str) -> Result<&'a str, ToolError> {
    if text.len() > MAX_TEXT {
        return fail(format!(
            "{what} is {} bytes; the limit is {MAX_TEXT} bytes (1 MiB)",
            text.len()
        ));
    }
    let t = text.trim();
    if t.is_empty() {
        return fail(format!("{what} is empty"));
    }
    Ok(t)
}

fn in_range(what: &str, v: Option<u64>, max: u64) -> Result<Option<u64>, ToolError> {
    match v {
        Some(0) => fail(format!("{what} must be at least 1")),
        Some(n) if n > max => fail(format!("{what} is {n}; the limit is {max}")),
        v => Ok(v),
    }
}

/// An event as the JSON object every program prints (meta an object).
pub fn event_json(e: &Event) -> Value {
    serde_json::from_str(&e.to_jsonl()).unwrap_or_else(|_| {
        json!({"id": e.id, "ts": e.ts, "kind": e.kind, "content": e.content, "meta": e.meta,
               "prev_hash": e.prev_hash, "hash": e.hash})
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecallArgs {
    query: String,
    k: Option<u64>,
    budget: Option<u64>,
    kinds: Option<Vec<String>>,
    current: Option<bool>,
}

fn recall_tool(cfg: &Config, a: RecallArgs) -> Result<Value, ToolError> {
    let query = check_text("query", &a.query)?;
    let k = in_range("k", a.k, MAX_K)?;
    let budget = in_range("budget", a.budget, MAX_BUDGET)?;
    let kinds = a.kinds.unwrap_or_default();
    for k in &kinds {
        if !RECALLED_KINDS.contains(&k.as_str()) {
            return fail(format!(
                "'{k}' is not a recalled kind ({})",
                RECALLED_KINDS.join(", ")
            ));
        }
    }
    let ledger = cfg.reader()?;
    let (dense, unavailable) = query_vector(cfg, &*ledger, query)?;
    let q = Query {
        dense,
        budget: budget.map_or(recall::DEFAULT_BUDGET, |b| b as usize),
        k: k.map(|k| k as usize),
        kinds: kinds.iter().map(|k| Kind::from(k.as_str())).collect(),
        current: a.current.unwrap_or(false),
        ..Query::new(query, i64::MAX)
    };
    let found = cfg.with_projections(&*ledger, |p| {
        ledger.in_snapshot(|l| recall::recall(l, p, &q))
    })??;
    let results: Vec<Value> = found
        .iter()
        .map(crate::context::retrieval::recalled_json)
        .collect();
    let mut answer = json!({"count": results.len(), "results": results});
    if let Some(why) = unavailable {
        answer["dense_unavailable"] = why.into();
    }
    Ok(answer)
}

/// The query's vector when the server has an embedding model: `(vector, None)`, or `(None,
/// why)` when the model failed (recall goes on with the other sources); a model whose
/// dimensions differ from its stored vectors is the caller's error.
fn query_vector<R: Indexes>(
    cfg: &Config,
    r: &R,
    query: &str,
) -> Result<(Option<recall::DenseQuery>, Option<String>), ToolError> {
    let Some(e) = &cfg.embedder else {
        return Ok((None, None));
    };
    let asked = recall::speakers::dense_text(r, query)?;
    let query = asked.as_deref().unwrap_or(query);
    let vector = match e.embed(&[recall::vectors::embed_text(query)]) {
        Ok(mut v) => v.pop().unwrap_or_default(),
        Err(err) => return Ok((None, Some(err.to_string()))),
    };
    if let Some(m) = r.vector_model(&e.id())? {
        if m.dim != vector.len() {
            return fail(format!(
                "embedding model {} gives {} dimensions, but its stored vectors have {}",
                e.id(),
                vector.len(),
                m.dim
            ));
        }
    }
    let model = e.id();
    Ok((Some(recall::DenseQuery { model, vector }), None))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RememberArgs {
    text: String,
    kind: Option<String>,
    supersedes: Option<Vec<i64>>,
}

fn remember(cfg: &Config, a: RememberArgs, source: &str) -> Result<Value, ToolError> {
    check_text("text", &a.text)?;
    let kind = a.kind.as_deref().unwrap_or(REMEMBER_KINDS[0]);
    if !REMEMBER_KINDS.contains(&kind) {
        return fail(format!(
            "remember writes only {} (not '{kind}')",
            REMEMBER_KINDS.join(", ")
        ));
    }
    let kind = Kind::from(kind);
    let mut meta = Map::new();
    meta.insert("source".into(), source.into());
    match kind {
        Kind::UserMessage => meta.insert("role".into(), "user".into()),
        Kind::AssistantMessage => meta.insert("role".into(), "assistant".into()),
        _ => None,
    };
    if let Some(ids) = a.supersedes.filter(|ids| !ids.is_empty()) {
        // Checked by the session (earlier events, none repeated) inside the write.
        meta.insert(crate::projection::supersession::KEY.into(), json!(ids));
    }
    // The text is kept verbatim (a message is what was said, whitespace and all).
    let ev = NewEvent::new(kind, a.text, meta)?;
    let event = session::append(&mut cfg.writer()?, &ev, &cfg.clock)?;
    Ok(json!({"event": event_json(&event)}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitArgs {
    text: String,
}

fn commit(cfg: &Config, a: CommitArgs, source: &str) -> Result<Value, ToolError> {
    commit_on(cfg, &mut cfg.writer()?, a, source)
}

/// `commit` on the ledger `w`.
fn commit_on<W: SessionWriter>(
    cfg: &Config,
    w: &mut W,
    a: CommitArgs,
    source: &str,
) -> Result<Value, ToolError> {
    // As a COMMIT: marker: the text stripped, its cid the sha1 prefix of that text.
    let text = check_text("text", &a.text)?;
    let cid = commitment_cid(text);
    let event = session::append_built(w, &cfg.clock, &mut |tx| {
        let head = tx.max_id()?;
        let score =
            cfg.with_projections(tx, |p| crate::session::derive::impact_score(p, &cid, head))?;
        Ok(Ok::<_, ToolError>(mirror::commitment_open(
            text, score, SOURCE, source,
        )))
    })??;
    Ok(json!({"cid": cid, "event": event_json(&event)}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CloseArgs {
    cid: String,
}

fn close(cfg: &Config, a: CloseArgs, source: &str) -> Result<Value, ToolError> {
    close_on(cfg, &mut cfg.writer()?, a, source)
}

/// `close` on the ledger `w`.
fn close_on<W: SessionWriter>(
    cfg: &Config,
    w: &mut W,
    a: CloseArgs,
    source: &str,
) -> Result<Value, ToolError> {
    let cid = a.cid.trim();
    if cid.is_empty() || cid.len() > 256 {
        return fail("cid must be 1 to 256 characters");
    }
    // Checked inside the write transaction: nobody closes it between the check and the write.
    let event = session::append_built(w, &cfg.clock, &mut |tx| {
        let (is_open, open) = cfg.with_projections(tx, |p| {
            let open: Vec<String> = p.mirror.open.keys().take(20).cloned().collect();
            (p.mirror.open.contains_key(cid), open)
        })?;
        if !is_open {
            return Ok(fail(if open.is_empty() {
                format!("no open commitment has cid '{cid}' (none is open)")
            } else {
                format!(
                    "no open commitment has cid '{cid}' (open: {})",
                    open.join(", ")
                )
            }));
        }
        let meta = obj(&[
            ("cid", cid.into()),
            ("origin", SOURCE.into()),
            ("source", source.into()),
        ]);
        Ok(
            NewEvent::new(Kind::CommitmentClose, mirror::close_content(cid), meta)
                .map_err(ToolError::from),
        )
    })??;
    Ok(json!({"cid": cid, "event": event_json(&event)}))
}

fn obj(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StateArgs {
    at: Option<i64>,
}

fn state(cfg: &Config, a: StateArgs) -> Result<Value, ToolError> {
    let ledger = cfg.reader()?;
    state_json(cfg, &*ledger, a.at)
}

/// The `{"type":"state"}` record of `pmm-replay --state [--at]`.
pub fn state_json<R: Indexes>(
    cfg: &Config,
    ledger: &R,
    at: Option<i64>,
) -> Result<Value, ToolError> {
    let mut bytes = Vec::new();
    match at {
        None => cfg.with_projections(ledger, |p| p.state_record().write_json(&mut bytes))??,
        Some(at) => {
            let last = ledger.max_id()?;
            if at < 1 || at > last {
                return fail(format!(
                    "event {at} is not in the ledger (events 1..{last})"
                ));
            }
            let p = checkpoint::project(ledger, Some(at), true)?.projections;
            p.state_record()
                .write_json(&mut bytes)
                .map_err(|e| ToolError(e.to_string()))?;
        }
    }
    serde_json::from_slice(&bytes).map_err(|e| ToolError(format!("state: {e}")))
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        ToolError(e.to_string())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsArgs {
    since: Option<i64>,
    until: Option<i64>,
    kind: Option<Value>,
    limit: Option<u64>,
}

fn events(cfg: &Config, a: EventsArgs) -> Result<Value, ToolError> {
    let limit = in_range("limit", a.limit, MAX_LIMIT)?.unwrap_or(DEFAULT_LIMIT) as usize;
    let kinds: Vec<String> = match a.kind {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(k)) => vec![k],
        Some(Value::Array(ks)) => ks
            .into_iter()
            .map(|k| match k {
                Value::String(s) => Ok(s),
                other => fail(format!("kind: expected a string, got {other}")),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return fail(format!("kind: expected a string or a list, got {other}")),
    };
    for k in &kinds {
        crate::event::check_kind(k).map_err(|e| ToolError(format!("kind: {e}")))?;
    }
    for (what, v) in [("since", a.since), ("until", a.until)] {
        if v.is_some_and(|v| v < 0) {
            return fail(format!("{what} must be an event id (0 or more)"));
        }
    }
    let ledger = cfg.reader()?;
    let filter = Filter {
        since: a.since,
        until: a.until,
        kinds: kinds.iter().map(|k| Kind::from(k.as_str())).collect(),
    };
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut truncated = false;
    ledger.scan(&filter, &mut |ev| {
        if out.len() >= limit {
            truncated = true;
            return Ok(false);
        }
        if !out.is_empty() && bytes + ev.content.len() + ev.meta.len() > MAX_REPLY_CONTENT {
            truncated = true;
            return Ok(false);
        }
        bytes += ev.content.len() + ev.meta.len();
        out.push(event_json(&ev));
        Ok(true)
    })?;
    let mut reply = json!({"count": out.len(), "events": out, "truncated": truncated});
    if truncated {
        if let Some(last) = reply["events"]
            .as_array()
            .and_then(|e| e.last())
            .and_then(|e| e["id"].as_i64())
        {
            reply["next_since"] = json!(last.checked_add(1));
        }
    }
    Ok(reply)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProveArgs {
    id: i64,
    size: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VerifyArgs {
    deep: Option<bool>,
}

/// The event behind `pmm://event/{id}`.
pub fn event_by_id(cfg: &Config, id: i64) -> Result<Value, ToolError> {
    let ledger = cfg.reader()?;
    match ledger.get(id)? {
        Some(e) => Ok(event_json(&e)),
        None => fail(format!(
            "no event {id} (the ledger has events 1..{})",
            ledger.max_id()?
        )),
    }
}

/// The state behind `pmm://state`.
pub fn current_state(cfg: &Config) -> Result<Value, ToolError> {
    let ledger = cfg.reader()?;
    state_json(cfg, &*ledger, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one table of tool names: every name has exactly one spec, so each is listed and,
    /// by the exhaustive match of `call_as`, dispatched.
    #[test]
    fn every_tool_name_has_one_spec() {
        let specs = specs();
        for tool in ToolName::ALL {
            assert_eq!(specs.iter().filter(|s| s.name == tool).count(), 1, "{tool}");
        }
        assert_eq!(specs.len(), ToolName::ALL.len());
    }

    fn ledger_with(db: &std::path::Path, notes: &[&str], clock: &Clock) {
        let mut w = Ledger::open_writer(db, 5000).unwrap();
        for text in notes {
            let note = NewEvent::new(Kind::from("reflection"), *text, Map::new()).unwrap();
            crate::session::append(&mut w, &note, clock).unwrap();
        }
    }

    /// A reader kept between calls answers as a new one would: it sees what was appended and
    /// erased since, and a ledger replaced by another file is read from the new file.
    #[test]
    fn kept_readers_see_the_ledger_as_it_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let clock = Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        ledger_with(&db, &["first"], &clock);
        let cfg = Config::new(db.clone(), false, 5000, clock);
        let first = cfg.reader().unwrap();
        assert_eq!(first.max_id().unwrap(), 1);
        drop(first);
        assert_eq!(
            cfg.readers.lock().unwrap().len(),
            1,
            "kept for the next call"
        );

        ledger_with(&db, &["second"], &clock);
        let again = cfg.reader().unwrap();
        assert_eq!(again.max_id().unwrap(), 2);
        assert_eq!(again.get(2).unwrap().unwrap().content, "second");
        drop(again);

        // Restored from elsewhere: the path now names another file, with other events.
        let other = dir.path().join("b.db");
        ledger_with(
            &other,
            &["restored one", "restored two", "restored three"],
            &clock,
        );
        std::fs::rename(&other, &db).unwrap();
        for companion in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(dir.path().join(format!("a.db{companion}")));
        }
        let restored = cfg.reader().unwrap();
        assert_eq!(restored.max_id().unwrap(), 3);
        assert_eq!(restored.get(1).unwrap().unwrap().content, "restored one");

        // Two calls at once get two readers; both are kept.
        let second = cfg.reader().unwrap();
        drop((restored, second));
        assert_eq!(cfg.readers.lock().unwrap().len(), 2);
    }

    /// A kept reader reads the file memory-mapped, and still answers as a new reader would:
    /// events appended after it was opened (past the end of the file it first mapped, and
    /// moved from the WAL into the file by the erasure's checkpoint), a text erased in place,
    /// and a ledger restored by `mv` over the one it mapped.
    #[test]
    fn mapped_readers_see_appends_erasures_and_restores() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let clock = Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        ledger_with(&db, &["first"], &clock);
        let cfg = Config::new(db.clone(), false, 5000, clock);
        let r = cfg.reader().unwrap();
        assert_eq!(r.file().mapped_bytes().unwrap(), MAPPED_BYTES);
        assert_eq!(r.get(1).unwrap().unwrap().content, "first");
        let size_at_open = std::fs::metadata(&db).unwrap().len();
        drop(r);

        let long = "a note long enough to fill pages of its own ".repeat(40);
        let notes = vec![long.as_str(); 200];
        ledger_with(&db, &notes, &clock);
        let mut w = Ledger::open_writer(&db, 5000).unwrap();
        let erased = crate::session::erase(&mut w, &[2], false, "test", "mcp", &clock).unwrap();
        assert!(
            erased.wal_truncated,
            "the appends are now in the file itself"
        );
        drop(w);
        assert!(std::fs::metadata(&db).unwrap().len() > size_at_open);

        let r = cfg.reader().unwrap();
        assert_eq!(
            r.file().mapped_bytes().unwrap(),
            MAPPED_BYTES,
            "the kept one"
        );
        assert_eq!(r.max_id().unwrap(), 202);
        assert_eq!(r.get(201).unwrap().unwrap().content, long);
        let gone = r.get(2).unwrap().unwrap();
        assert_ne!(
            gone.content, long,
            "erased in place, not read from an old copy"
        );
        assert_eq!(r.get(202).unwrap().unwrap().kind, Kind::from("erasure"));
        drop(r);

        let other = dir.path().join("b.db");
        ledger_with(&other, &["restored"], &clock);
        std::fs::rename(&other, &db).unwrap();
        for companion in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(dir.path().join(format!("a.db{companion}")));
        }
        let r = cfg.reader().unwrap();
        assert_eq!(r.file().mapped_bytes().unwrap(), MAPPED_BYTES);
        assert_eq!(r.max_id().unwrap(), 1);
        assert_eq!(r.get(1).unwrap().unwrap().content, "restored");
    }

    /// Two calls on one server (two HTTP sessions) run `f` on the projections at the same
    /// time: each waits inside `f` for the other, which a lock held across `f` would make a
    /// deadlock (the barrier's timeout ends the test instead).
    #[test]
    fn calls_read_the_projections_at_the_same_time() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let clock = Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        let mut w = Ledger::open_writer(&db, 5000).unwrap();
        let note = NewEvent::new(Kind::from("reflection"), "a note", Map::new()).unwrap();
        crate::session::append(&mut w, &note, &clock).unwrap();
        drop(w);
        let cfg = std::sync::Arc::new(Config::new(db, false, 5000, clock));
        let met = std::sync::Arc::new((Mutex::new(0), std::sync::Condvar::new()));
        let calls: Vec<_> = (0..2)
            .map(|_| {
                let (cfg, met) = (cfg.clone(), met.clone());
                std::thread::spawn(move || {
                    let r = cfg.reader().unwrap();
                    cfg.with_projections(&*r, |p| {
                        let (n, cv) = &*met;
                        let mut n = n.lock().unwrap();
                        *n += 1;
                        cv.notify_all();
                        let (n, _) = cv
                            .wait_timeout_while(n, std::time::Duration::from_secs(10), |n| *n < 2)
                            .unwrap();
                        (*n == 2, p.mirror.last_event_id)
                    })
                    .unwrap()
                })
            })
            .collect();
        for c in calls {
            assert_eq!(c.join().unwrap(), (true, 1), "the other call never came in");
        }
    }

    /// The writing tools on the in-memory log ([`crate::store::memory`]): what they read and
    /// write inside one write session, with no file.
    mod on_memory {
        use super::*;
        use crate::store::memory::Memory;

        fn cfg() -> Config {
            let clock = Clock::pinned("2025-11-24T05:55:41.123456Z").unwrap();
            Config::new(PathBuf::from("unused.db"), false, 0, clock)
        }

        /// `commit` opens a commitment under the cid of its stripped text, and `close` closes
        /// it; the projections kept between the calls see both.
        #[test]
        fn commit_then_close() {
            let (cfg, mut m) = (cfg(), Memory::new());
            let text = "  water the plants ";
            let a = CommitArgs { text: text.into() };
            let opened = commit_on(&cfg, &mut m, a, "mcp").unwrap();
            let cid = opened["cid"].as_str().unwrap().to_string();
            assert_eq!(cid, commitment_cid("water the plants"));
            assert_eq!(opened["event"]["kind"], "commitment_open");
            assert_eq!(opened["event"]["meta"]["source"], "mcp");
            let open = cfg.with_projections(&m, |p| p.mirror.open.contains_key(&cid));
            assert!(open.unwrap());
            let a = CloseArgs { cid: cid.clone() };
            let closed = close_on(&cfg, &mut m, a, "mcp").unwrap();
            assert_eq!(closed["event"]["kind"], "commitment_close");
            let open = cfg.with_projections(&m, |p| p.mirror.open.contains_key(&cid));
            assert!(!open.unwrap());
            assert_eq!(m.max_id().unwrap(), 2);
        }

        /// `close` of a cid that is not open is a tool error naming the open ones, and writes
        /// nothing.
        #[test]
        fn closing_what_is_not_open_writes_nothing() {
            let (cfg, mut m) = (cfg(), Memory::new());
            let none = close_on(
                &cfg,
                &mut m,
                CloseArgs {
                    cid: "0badc0de".into(),
                },
                "mcp",
            );
            let none = none.unwrap_err().0;
            assert_eq!(none, "no open commitment has cid '0badc0de' (none is open)");
            let a = CommitArgs { text: "a".into() };
            let cid = commit_on(&cfg, &mut m, a, "mcp").unwrap()["cid"].clone();
            let other = close_on(
                &cfg,
                &mut m,
                CloseArgs {
                    cid: "0badc0de".into(),
                },
                "mcp",
            );
            let other = other.unwrap_err().0;
            assert!(
                other.ends_with(&format!("(open: {})", cid.as_str().unwrap())),
                "{other}"
            );
            assert_eq!(m.max_id().unwrap(), 1);
        }
    }
}
