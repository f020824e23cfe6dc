//! The chat's admin commands (FORMATS.md §13.2–13.4; docs/reference.md maps them): the
//! self-model at an event and between two, a commitment's thread and its neighbourhood, the
//! concept layer, chat exports, the last reply as received, retrieval status and a turn's
//! re-check, a projection checkpoint, the retrieval config. Each answers one line or a few;
//! arguments it does not know are a `usage:` line, never ignored.

use crate::context::prompt as cp;
use crate::context::select::RetrievalConfig;
use crate::event::{Clock, Kind, NewEvent};
use crate::interchange::{ExportContext, ExportFormat};
use crate::projection::checkpoint;
use crate::projection::graph::{GraphAnswer, GraphFold, GraphQuery};
use crate::store::log::SessionWriter;
use crate::store::{self, EventLog, Filter, Indexes, Ledger};
use serde_json::{json, Map, Value};

/// The `/rsm` usage line.
pub const RSM_USAGE: &str = "usage: /rsm [ID | diff A B]";
/// The `/graph` usage line.
pub const GRAPH_USAGE: &str =
    "usage: /graph [stats] | /graph thread CID | /graph explain CID | /graph concepts";
/// The `/pm` topics.
pub const PM_USAGE: &str =
    "usage: /pm retrieval status | /pm retrieval verify TURN | /pm checkpoint";
/// The `/config` usage line.
pub const CONFIG_USAGE: &str =
    "usage: /config retrieval fixed|vector|hybrid [limit N] [budget CHARS]";
/// The `/raw` usage line.
pub const RAW_USAGE: &str = "usage: /raw [on | off | last]";

/// An event id typed as an argument, within the ledger.
fn event_id(ledger: &Ledger, word: &str) -> anyhow::Result<Result<i64, String>> {
    let last = ledger.max_id()?;
    Ok(match word.parse::<i64>() {
        Ok(id) if (1..=last).contains(&id) => Ok(id),
        Ok(id) => Err(format!(
            "event {id} is not in the ledger (events 1..{last})"
        )),
        Err(_) => Err(format!("event ids are integers, not {word:?}")),
    })
}

/// The self-model as `/rsm` shows it.
fn rsm_text(p: &crate::projection::state::Projections) -> String {
    let t: Vec<String> = p
        .rsm
        .tendencies()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!(
        "tendencies: {}\nknowledge gaps: {}\nreflection intents: {}",
        t.join(", "),
        p.rsm.knowledge_gaps().join(", "),
        p.rsm.reflection_intents().len()
    )
}

/// `/rsm [ID | diff A B]`: the self-model now, as of event ID, or what changed from A to B.
pub fn rsm(ledger: &Ledger, args: &[&str]) -> anyhow::Result<String> {
    let ids: Vec<&str> = match args {
        [] => {
            return Ok(rsm_text(
                &checkpoint::project(ledger, None, true)?.projections,
            ))
        }
        [id] => vec![id],
        ["diff", a, b] => vec![a, b],
        _ => return Ok(RSM_USAGE.into()),
    };
    let mut at = Vec::new();
    for w in ids {
        match event_id(ledger, w)? {
            Ok(id) => at.push(id),
            Err(e) => return Ok(format!("error: {e}")),
        }
    }
    if let [id] = at[..] {
        let p = checkpoint::project(ledger, Some(id), true)?.projections;
        return Ok(format!("as of event {id}\n{}", rsm_text(&p)));
    }
    let a = checkpoint::project(ledger, Some(at[0]), true)?.projections;
    let b = checkpoint::project(ledger, Some(at[1]), true)?.projections;
    let d = crate::projection::rsm::diff(&a.rsm, &b.rsm);
    let delta: Vec<String> = d
        .tendencies_delta
        .iter()
        .map(|(k, v)| format!("{k}={v:+}"))
        .collect();
    Ok(format!(
        "from event {} to {}\ntendencies delta: {}\ngaps added: {}\ngaps resolved: {}",
        at[0],
        at[1],
        delta.join(", "),
        d.gaps_added.join(", "),
        d.gaps_resolved.join(", ")
    ))
}

/// `/graph [stats] | thread CID | explain CID | concepts`.
pub fn graph(ledger: &Ledger, args: &[&str]) -> anyhow::Result<String> {
    let (query, heading) = match args {
        [] | ["stats"] => {
            let p = checkpoint::project(ledger, None, true)?.projections;
            return Ok(serde_json::to_string(&p.graph.stats())?);
        }
        ["thread", cid] => (GraphQuery::Thread(cid.to_string()), "Thread for"),
        ["explain", cid] => (GraphQuery::Explain(cid.to_string()), "Explanation for"),
        ["concepts"] => return concepts(ledger),
        _ => return Ok(GRAPH_USAGE.into()),
    };
    let cid = args[1];
    let mut fold = GraphFold::new(query);
    ledger.scan(&Filter::default(), &mut |e| {
        fold.apply(&e);
        Ok(true)
    })?;
    let ids = match fold.answer() {
        Ok(GraphAnswer::Events(ids)) => ids,
        _ => return Ok(format!("no commitment has cid {cid}")),
    };
    let mut out = format!("{heading} {cid}:");
    for id in ids {
        if let Some(e) = ledger.get(id)? {
            out.push('\n');
            out.push_str(
                crate::cli::line::event(&e, crate::cli::line::Style::Reference).trim_end(),
            );
        }
    }
    Ok(out)
}

/// `/graph concepts`: each defined concept, its bindings and relations.
fn concepts(ledger: &Ledger) -> anyhow::Result<String> {
    let p = checkpoint::project(ledger, None, true)?.projections;
    let c = &p.concepts;
    let lines: Vec<String> = c
        .all_tokens()
        .iter()
        .map(|t| {
            let bound = c
                .events_for_concept(t, None)
                .iter()
                .filter(|&&i| i > 0)
                .count();
            let def = c.definition(t).map_or("", |d| d.definition.as_str());
            format!("{t} — {def} ({bound} bound)")
        })
        .collect();
    Ok(if lines.is_empty() {
        "no concepts defined".into()
    } else {
        lines.join("\n")
    })
}

/// `/export md|json|jsonl [FILE]`: the conversation as Markdown, or the ledger as JSON or
/// JSON Lines (as `pmm-export` writes them), to FILE or `chat_export_<UTC time>.<ext>`.
pub fn export(ledger: &Ledger, args: &[&str], clock: &Clock) -> anyhow::Result<Option<String>> {
    let (format, ext) = match args.first().copied() {
        Some("md" | "markdown") => (ExportFormat::Md, "md"),
        Some("json") => (ExportFormat::Json, "json"),
        Some("jsonl") => (ExportFormat::Jsonl, "jsonl"),
        _ => return Ok(None),
    };
    let now = clock.now();
    let file = match args {
        [_] => format!("chat_export_{}.{ext}", now.format("%Y%m%d_%H%M%S")),
        [_, f] => f.to_string(),
        _ => return Ok(Some("usage: /export md|json|jsonl [FILE]".into())),
    };
    let path = std::path::Path::new(&file);
    let target = crate::outfile::OutputFile::create(path, Some(ledger.path()))?;
    let ctx = ExportContext {
        exported_at: now,
        output_name: path.file_name().map(|n| n.to_string_lossy().into_owned()),
    };
    let mut sink = crate::interchange::sink(format, target.writer()?, &ctx)?;
    let mut n = 0;
    ledger.scan(&Filter::default(), &mut |e| {
        sink.event(&e).map_err(|err| crate::Error::io(&file, err))?;
        n += 1;
        Ok(true)
    })?;
    sink.finish().map_err(|err| crate::Error::io(&file, err))?;
    target.commit()?;
    Ok(Some(format!("{n} events exported ({ext}) to {file}")))
}

/// `/raw last`: the newest reply as it was received, markers included.
pub fn last_reply(ledger: &Ledger) -> anyhow::Result<String> {
    Ok(
        match ledger.last_of_kind(Kind::AssistantMessage, 1)?.pop() {
            Some(e) => format!("[{}] {}", e.id, e.content),
            None => "no replies yet".into(),
        },
    )
}

/// `/pm retrieval status | retrieval verify TURN | checkpoint`.
pub fn pm(ledger: &Ledger, args: &[&str]) -> anyhow::Result<String> {
    match args {
        ["retrieval", "status"] => retrieval_status(ledger),
        ["retrieval", "verify", turn] => match event_id(ledger, turn)? {
            Ok(id) => verify_turn(ledger, id),
            Err(e) => Ok(format!("error: {e}")),
        },
        ["checkpoint"] => {
            let projected = checkpoint::project(ledger, None, true)?;
            let at = projected.projections.mirror.last_event_id;
            checkpoint::keeping(&projected.projections, |c| {
                store::save_projection_checkpoint(ledger.path(), c)
            });
            Ok(format!("projection checkpoint saved at event {at} (a cache: pmm-replay --check-fast proves it)"))
        }
        _ => Ok(PM_USAGE.into()),
    }
}

/// Index and vector coverage, and the retrieval config in force.
fn retrieval_status(ledger: &Ledger) -> anyhow::Result<String> {
    let p = checkpoint::project(ledger, None, true)?.projections;
    let cfg = RetrievalConfig::from_config(p.mirror.retrieval.as_ref());
    let messages = ledger.count_kind_after(Kind::UserMessage, 0)?
        + ledger.count_kind_after(Kind::AssistantMessage, 0)?;
    let embeddings = ledger.count_kind_after(Kind::EmbeddingAdd, 0)?;
    let mut s = format!(
        "strategy:{} limit:{} budget:{} model:{} dims:{}\nmessages:{messages} embeddings:{embeddings}",
        cfg.strategy.as_str(),
        cfg.limit,
        cfg.budget,
        cfg.model,
        cfg.dims
    );
    s.push_str(&match ledger.lag(crate::store::Derived::Text)? {
        Some(lag) => format!(" full-text index: {lag} events behind"),
        None => " full-text index: none yet".into(),
    });
    for (name, dim, n) in ledger.vector_models()? {
        let missing = ledger.missing_vector_count(&name)?;
        s.push_str(&format!(
            "\nvectors {name} ({dim} dims): {n}, {missing} missing"
        ));
    }
    Ok(s)
}

/// `/pm retrieval verify TURN`: the turn's recorded selection re-checked — its digest, and the
/// prompt rebuilt from it against the reply's `prompt_sha256`.
fn verify_turn(ledger: &Ledger, id: i64) -> anyhow::Result<String> {
    let turn = match cp::turn_of(ledger, id)? {
        Ok(t) => t,
        Err(e) => return Ok(format!("error: {e}")),
    };
    let sel = match cp::recorded_selection(ledger, &turn)? {
        Ok(s) => s,
        Err(e) => return Ok(format!("error: {e}")),
    };
    let prompt = match cp::rebuild(ledger, &turn)? {
        Ok(p) if p.sha256() == turn.recorded => "matches its prompt_sha256".to_string(),
        Ok(p) => format!(
            "DIFFERS: rebuilt {} but recorded {}",
            p.sha256(),
            turn.recorded
        ),
        Err(e) => format!("not rebuilt: {e}"),
    };
    Ok(format!(
        "retrieval_selection turn_id={} selected={:?}\nprompt rebuilt from it: {prompt}",
        turn.reply, sel.selected
    ))
}

/// `/config retrieval fixed|vector|hybrid [limit N] [budget CHARS]`: appends a retrieval
/// `config` (source `chat`) keeping the current config's other fields; nothing when it would
/// change nothing.
pub fn config<W: SessionWriter>(
    ledger: &mut W,
    args: &[&str],
    clock: &Clock,
) -> anyhow::Result<String> {
    let ["retrieval", strategy, rest @ ..] = args else {
        return Ok(CONFIG_USAGE.into());
    };
    if crate::event::config::Strategy::parse(strategy).is_none() || rest.len() % 2 == 1 {
        return Ok(CONFIG_USAGE.into());
    }
    let p = checkpoint::project(&*ledger, None, true)?.projections;
    let current = p.mirror.retrieval.clone();
    let mut next: Map<String, Value> = match &current {
        Some(Value::Object(m)) => m.clone(),
        _ => serde_json::from_str(RetrievalConfig::DEFAULT_CONTENT)?,
    };
    next.insert("strategy".into(), json!(strategy));
    for pair in rest.chunks(2) {
        let n: u64 = match pair[1].parse() {
            Ok(n) if n > 0 => n,
            _ => return Ok(format!("error: {} must be a positive integer", pair[0])),
        };
        match pair[0] {
            "limit" => next.insert("limit".into(), json!(n)),
            "budget" => next.insert("budget".into(), json!(n)),
            _ => return Ok(CONFIG_USAGE.into()),
        };
    }
    let next = Value::Object(next);
    if current.as_ref() == Some(&next) {
        return Ok("no change (idempotent)".into());
    }
    let content = crate::canon::to_string(&next)?;
    let mut m = Map::new();
    m.insert("source".into(), crate::event::Source::Chat.into());
    let ev = NewEvent::new(Kind::Config, content.clone(), m)
        .map_err(|e| crate::Error::bad_input(None, e))?;
    match crate::session::append(ledger, &ev, clock) {
        Ok(e) => Ok(format!(
            "retrieval config updated (event {}): {content}",
            e.id
        )),
        Err(e @ crate::Error::PolicyViolation { .. }) => Ok(format!("error: {e}")),
        Err(e) => Err(e.into()),
    }
}
