//! `pmm-graph`: query the event graph.

use crate::cli::line::{self, Style};
use crate::cli::{CommonArgs, Exit, LedgerArgs, Out, Program};
use crate::event::{Event, Kind};
use crate::projection::graph::{
    Direction, EventGraph, GraphAnswer, GraphFold, GraphQuery, GraphStats, NodeKind,
};
use crate::store::EventLog;
use crate::store::{Filter, Ledger};
use crate::Error;
use std::io::{self, Write};

const AFTER_HELP: &str = "\
EXAMPLES:
  How big the graph is:
    pmm-graph stats | jq .counts_by_kind
  Everything that happened to commitment e86ccfd1, as events, then as a table:
    pmm-graph thread e86ccfd1
    pmm-graph thread e86ccfd1 --text
  The contents of the thread's reflections:
    pmm-graph thread e86ccfd1 | jq -r 'select(.kind==\"reflection\") | .content'
  The thread and everything next to it (the reference CLI's /graph explain):
    pmm-graph explain e86ccfd1 --text
  What points at event 94, and which open commitments came from it:
    pmm-graph neighbors 94 --direction in --kind commitment_open | jq .meta.cid
  The concepts the conversation is about, most bound first:
    pmm-graph concepts | jq -s -c 'sort_by(-.bindings)[] | {token, bindings}'
  The thread of every open commitment:
    pmm-metrics | jq -r '.open_commitments[]' | xargs -r -n1 pmm-graph thread --text
  A picture (Graphviz), and the graph for networkx:
    pmm-graph export --format dot | dot -Tsvg > graph.svg
    pmm-graph export --format json > graph.json

OUTPUT:
  stats      one {\"type\":\"graph_stats\",\"nodes\",\"edges\",\"counts_by_kind\"} line
  thread     the thread's events, one JSON line each as pmm-export --format jsonl prints them:
             the assistant message the first open of CID commits to, that open, its closes,
             then the reflections on that assistant message (each group by id)
  explain    the events of the thread and of all their direct neighbours, by id
  neighbors  the events next to ID, by id
  concepts   one {\"type\":\"concept\",\"token\",\"kind\",\"definition\",\"defined_at\",\"bindings\",
             \"threads\",\"relations\":[{\"relation\",\"concept\"}],\"first_event\",\"last_event\"} line per
             defined concept, by token (the concept layer, not the event graph); --text: one
             line each
  export     dot: a Graphviz digraph, nodes labelled \"<id> <kind>\", edges labelled with their
             meaning; json: one line in networkx node-link form
             {\"type\":\"graph\",\"directed\":true,...,\"nodes\":[{\"id\",\"kind\"}],
             \"links\":[{\"source\",\"target\",\"label\"}]}
  --text     a human rendering instead: \"[<id>] <kind> | <first line of content, 80 chars>\"
             under a heading, or the stats as \"nodes: N\" lines (not for export)
  Nodes are the events of kinds user_message, assistant_message, commitment_open,
  commitment_close, identity_adoption, reflection and summary_update. Edges point from the
  newer event to the older: replies_to (assistant message to the latest user message),
  adopts_identity_for (identity adoption to the latest assistant message or reflection),
  commits_to (open to the first assistant message with its text on a COMMIT: line), closes
  (close to the first open of its cid), reflects_on (reflection to its meta.about_event).
  The graph is built from the whole ledger on every run.

EXIT STATUS:
  0  answered (a closed pipe also ends quietly with 0); an event without neighbours prints
     nothing and exits 0
  1  nothing to answer about: no commitment_open has CID (thread, explain), or ID is not a
     node of the graph (neighbors); stdout is empty and stderr says why
  2  missing ledger, not a ledger, bad arguments (--text with export, an untracked --kind)

ENVIRONMENT:
  PMM_DB    the ledger when --db is not given (default .data/pmmdb/pmm.db)";

/// Query the event graph: stats, the thread of a commitment, neighbours, Graphviz export.
///
/// Builds the reference's MemeGraph from the whole ledger (the events of the tracked kinds are
/// nodes; edges link a reply to its message, a commitment to the reply that made it, a close
/// to its open, a reflection to its subject) and answers one query about it.
#[derive(Debug, clap::Parser)]
#[command(name = "pmm-graph", version, after_long_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    common: CommonArgs,

    /// Print a human rendering instead of JSON Lines
    #[arg(long, global = true)]
    text: bool,

    #[command(subcommand)]
    query: Option<Query>,
}

impl Program for Args {
    fn common(&self) -> &CommonArgs {
        &self.common
    }
}

/// The queries.
#[derive(Debug, Clone, clap::Subcommand)]
enum Query {
    /// Node and edge counts and nodes per kind
    Stats,
    /// The events of commitment CID's thread: the reply that made it, the open, its closes,
    /// the reflections on the reply
    Thread {
        /// The commitment id (meta.cid of its commitment_open)
        cid: String,
    },
    /// The thread of CID and every event directly linked to it, by id
    Explain {
        /// The commitment id (meta.cid of its commitment_open)
        cid: String,
    },
    /// The events linked to event ID, by id
    Neighbors {
        /// The event id
        #[arg(allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(1..))]
        id: i64,
        /// Which links to follow: in (newer events pointing at ID), out (older events ID
        /// points at), or both
        #[arg(long, value_enum, default_value_t = Dir::Both)]
        direction: Dir,
        /// Only neighbours of this kind
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
    },
    /// The concept layer: every defined concept with its definition, bindings, threads,
    /// relations, and first and last bound event
    Concepts,
    /// The whole graph, as Graphviz DOT or JSON
    Export {
        /// Output format
        #[arg(long, short = 'f', value_enum, default_value_t = GraphFormat::Json)]
        format: GraphFormat,
    },
}

/// `--direction`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Dir {
    In,
    Out,
    Both,
}

impl Dir {
    fn direction(self) -> Direction {
        match self {
            Dir::In => Direction::In,
            Dir::Out => Direction::Out,
            Dir::Both => Direction::Both,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Dir::In => "in",
            Dir::Out => "out",
            Dir::Both => "both",
        }
    }
}

/// `export --format`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum GraphFormat {
    Dot,
    Json,
}

/// The stats record: `{"type":"graph_stats","nodes","edges","counts_by_kind"}`.
#[derive(serde::Serialize)]
struct StatsLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    stats: &'a GraphStats,
}

/// Folds every event of the ledger into `apply`, with a progress bar.
fn fold(ledger: &Ledger, quiet: bool, mut apply: impl FnMut(&Event)) -> crate::Result<()> {
    let bar = crate::cli::progress(ledger.max_id()?.max(0) as u64, quiet, "reading");
    ledger.scan(&Filter::default(), &mut |ev| {
        if ev.id % 4096 == 0 {
            bar.set_position(ev.id.max(0) as u64);
        }
        apply(&ev);
        Ok(true)
    })?;
    bar.finish_and_clear();
    Ok(())
}

impl Query {
    /// The library's query; `--kind` must be a kind the graph tracks.
    fn graph_query(&self) -> crate::Result<GraphQuery> {
        Ok(match self {
            Query::Stats => GraphQuery::Stats,
            Query::Thread { cid } => GraphQuery::Thread(cid.clone()),
            Query::Explain { cid } => GraphQuery::Explain(cid.clone()),
            Query::Neighbors {
                id,
                direction,
                kind,
            } => GraphQuery::Neighbors {
                id: *id,
                direction: direction.direction(),
                kind: kind.as_deref().map(tracked_kind).transpose()?,
            },
            Query::Export { .. } | Query::Concepts => GraphQuery::Export,
        })
    }

    /// The heading of the `--text` rendering of the events that answer this query.
    fn heading(&self) -> String {
        match self {
            Query::Thread { cid } => format!("Thread for {cid}:"),
            Query::Explain { cid } => format!("Explanation for {cid}:"),
            Query::Neighbors { id, direction, .. } => {
                format!("Neighbors of {id} ({}):", direction.name())
            }
            Query::Stats | Query::Export { .. } | Query::Concepts => String::new(),
        }
    }
}

/// Prints the events `ids` (as JSON lines, or text lines under `heading`).
fn print_events(
    ledger: &Ledger,
    ids: &[i64],
    text: Option<String>,
    out: &mut Out,
) -> anyhow::Result<()> {
    if let Some(heading) = &text {
        out.raw(heading.as_bytes())?;
        out.raw(b"\n")?;
    }
    for &id in ids {
        let Some(ev) = ledger.get(id)? else {
            continue;
        };
        if text.is_some() {
            out.raw(line::event(&ev, Style::Reference).as_bytes())?;
        } else {
            out.event(&ev)?;
        }
    }
    Ok(())
}

fn tracked_kind(kind: &str) -> crate::Result<NodeKind> {
    NodeKind::from_kind(&Kind::from(kind)).ok_or_else(|| {
        let names: Vec<&str> = NodeKind::ALL.iter().map(|k| k.as_str()).collect();
        Error::bad_input(
            Some("--kind".into()),
            format!(
                "'{kind}' is not a kind the graph tracks ({})",
                names.join(", ")
            ),
        )
    })
}

/// The graph's statistics as one JSON line, or as `--text` lines.
fn print_stats(s: &GraphStats, text: bool, out: &mut Out) -> std::io::Result<()> {
    if text {
        let mut t = format!("nodes: {}\nedges: {}\ncounts_by_kind:\n", s.nodes, s.edges);
        for (k, n) in &s.counts_by_kind {
            t.push_str(&format!("  {k}: {n}\n"));
        }
        out.raw(t.as_bytes())
    } else {
        out.record(&StatsLine {
            kind: "graph_stats",
            stats: s,
        })
    }
}

/// Runs `pmm-graph`.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    // Validate everything before reading the ledger. The query is optional to clap only so
    // that `--completions` works without one.
    let Some(query) = args.query.clone() else {
        return Err(Error::bad_input(
            None,
            "a query is required: stats, thread, explain, neighbors, concepts or export (see 'pmm-graph --help')",
        )
        .into());
    };
    if args.text && matches!(query, Query::Export { .. }) {
        return Err(Error::bad_input(
            Some("--text".into()),
            "export has no text rendering; use --format dot or --format json",
        )
        .into());
    }
    let graph_query = query.graph_query()?;
    let ledger = Ledger::open_reader(&args.ledger.path())?;
    let mut out = Out::new();
    if matches!(query, Query::Concepts) {
        concepts(&ledger, args.text, &mut out)?;
        out.flush()?;
        return Ok(Exit::Success);
    }
    let mut graph = GraphFold::new(graph_query);
    fold(&ledger, args.common.quiet, |ev| graph.apply(ev))?;
    match graph.answer().map_err(|e| Error::NotFound(e.to_string()))? {
        GraphAnswer::Stats(s) => print_stats(&s, args.text, &mut out)?,
        GraphAnswer::Events(ids) => {
            let heading = args.text.then(|| query.heading());
            print_events(&ledger, &ids, heading, &mut out)?;
        }
        GraphAnswer::Graph(g) => {
            // Only export asks for the whole graph.
            let format = match query {
                Query::Export { format } => format,
                _ => GraphFormat::Json,
            };
            export(g, format)?;
        }
    }
    out.flush()?;
    Ok(Exit::Success)
}

/// `concepts`: one `{"type":"concept"}` line per defined concept (token order), or a text
/// table, from the projections (a checkpoint and the events since).
fn concepts(ledger: &Ledger, text: bool, out: &mut Out) -> anyhow::Result<()> {
    let p = crate::projection::checkpoint::project(ledger, None, true)?.projections;
    let c = &p.concepts;
    for tok in c.all_tokens() {
        let def = c.definition(&tok);
        let events: Vec<i64> = c
            .events_for_concept(&tok, None)
            .into_iter()
            .filter(|&id| id > 0)
            .collect();
        let relations: Vec<serde_json::Value> = c
            .relations_of(&tok)
            .into_iter()
            .map(|(relation, other)| serde_json::json!({"relation": relation, "concept": other}))
            .collect();
        let threads = c.threads_for(&tok);
        if text {
            let line = format!(
                "{tok} — {} | {} bound, events {} | threads: {} | linked: {}\n",
                def.map_or("", |d| d.definition.as_str()),
                events.len(),
                match (events.first(), events.last()) {
                    (Some(a), Some(b)) => format!("{a}..{b}"),
                    _ => "none".into(),
                },
                if threads.is_empty() {
                    "none".into()
                } else {
                    threads.join(", ")
                },
                c.relations_of(&tok)
                    .iter()
                    .map(|(r, o)| format!("{o} ({r})"))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
            out.raw(line.as_bytes())?;
            continue;
        }
        out.record(&serde_json::json!({
            "type": "concept",
            "token": tok,
            "kind": def.map(|d| d.concept_kind.clone()),
            "definition": def.map(|d| d.definition.clone()),
            "defined_at": def.map(|d| d.event_id),
            "bindings": events.len(),
            "threads": threads,
            "relations": relations,
            "first_event": events.first(),
            "last_event": events.last(),
        }))?;
    }
    Ok(())
}

/// Writes the whole graph to stdout as Graphviz DOT or one JSON line.
fn export(graph: &EventGraph, format: GraphFormat) -> io::Result<()> {
    let mut w = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    match format {
        GraphFormat::Dot => graph.write_dot(&mut w)?,
        GraphFormat::Json => {
            graph.write_json(&mut w)?;
            w.write_all(b"\n")?;
        }
    }
    w.flush()
}
