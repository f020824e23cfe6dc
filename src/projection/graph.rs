//! The event graph (the reference's MemeGraph, FORMATS.md §6): which reply answers which
//! message, which reply a commitment came from, which open a close ends, what a reflection is
//! about. A fold over the events in id order; nodes are the events of the tracked kinds, edges
//! point from the newer event to the older one.
//!
//! The reference finds each edge's target by scanning every node and reading its event back
//! from the database; this fold keeps the few facts the rules need in maps instead (the latest
//! user message, the latest reply or reflection, the first reply carrying each `COMMIT:` text,
//! the first open of each cid), so building is linear and a node costs an id and a kind.

use crate::event::{Event, Kind, Seen};
use crate::marker;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use petgraph::Direction as PetDirection;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Write};

/// The kinds that become nodes (meme_graph.py `TRACKED_KINDS`); every other kind is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeKind {
    /// `user_message`.
    UserMessage,
    /// `assistant_message`.
    AssistantMessage,
    /// `commitment_open`.
    CommitmentOpen,
    /// `commitment_close`.
    CommitmentClose,
    /// `identity_adoption`.
    IdentityAdoption,
    /// `reflection`.
    Reflection,
    /// `summary_update`.
    SummaryUpdate,
}

impl NodeKind {
    /// Every tracked kind.
    pub const ALL: [NodeKind; 7] = [
        NodeKind::UserMessage,
        NodeKind::AssistantMessage,
        NodeKind::CommitmentOpen,
        NodeKind::CommitmentClose,
        NodeKind::IdentityAdoption,
        NodeKind::Reflection,
        NodeKind::SummaryUpdate,
    ];

    /// The tracked kind of an event of `kind`, or `None` for a kind the graph ignores.
    pub fn from_kind(kind: &Kind) -> Option<NodeKind> {
        Some(match kind {
            Kind::UserMessage => NodeKind::UserMessage,
            Kind::AssistantMessage => NodeKind::AssistantMessage,
            Kind::CommitmentOpen => NodeKind::CommitmentOpen,
            Kind::CommitmentClose => NodeKind::CommitmentClose,
            Kind::IdentityAdoption => NodeKind::IdentityAdoption,
            Kind::Reflection => NodeKind::Reflection,
            Kind::SummaryUpdate => NodeKind::SummaryUpdate,
            _ => return None,
        })
    }

    /// The event kind.
    pub fn kind(self) -> Kind {
        match self {
            NodeKind::UserMessage => Kind::UserMessage,
            NodeKind::AssistantMessage => Kind::AssistantMessage,
            NodeKind::CommitmentOpen => Kind::CommitmentOpen,
            NodeKind::CommitmentClose => Kind::CommitmentClose,
            NodeKind::IdentityAdoption => Kind::IdentityAdoption,
            NodeKind::Reflection => Kind::Reflection,
            NodeKind::SummaryUpdate => Kind::SummaryUpdate,
        }
    }

    /// The event kind's name.
    pub fn as_str(self) -> &'static str {
        self.kind().name().unwrap_or_default()
    }
}

impl std::fmt::Display for NodeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an edge means (FORMATS.md §6.2). Edges point from the newer event to the older one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EdgeLabel {
    /// An assistant message to the latest user message before it.
    RepliesTo,
    /// An identity adoption to the latest assistant message or reflection before it.
    AdoptsIdentityFor,
    /// A commitment open to the first assistant message with its text on a `COMMIT:` line.
    CommitsTo,
    /// A commitment close to the first open of its cid.
    Closes,
    /// A reflection to the node named by its `meta.about_event`.
    ReflectsOn,
    /// An event to each earlier node its `meta.supersedes` names (a correction; not in the
    /// reference, whose ledgers have none).
    Supersedes,
}

impl EdgeLabel {
    /// The reference's label.
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeLabel::RepliesTo => "replies_to",
            EdgeLabel::AdoptsIdentityFor => "adopts_identity_for",
            EdgeLabel::CommitsTo => "commits_to",
            EdgeLabel::Closes => "closes",
            EdgeLabel::ReflectsOn => "reflects_on",
            EdgeLabel::Supersedes => "supersedes",
        }
    }
}

impl std::fmt::Display for EdgeLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node: an event of a tracked kind. Content stays in the ledger; fetch it by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// The event id.
    pub id: i64,
    /// The event kind.
    pub kind: NodeKind,
}

/// Which edges of a node [`EventGraph::neighbors`] follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Edges into the node: the newer events that point at it.
    In,
    /// Edges out of the node: the older events it points at.
    Out,
    /// Both.
    #[default]
    Both,
}

/// `graph_stats()` (FORMATS.md §6.3): node and edge counts, nodes per kind (only kinds that
/// occur, in name order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GraphStats {
    /// Number of nodes.
    pub nodes: usize,
    /// Number of edges.
    pub edges: usize,
    /// Nodes per kind.
    pub counts_by_kind: BTreeMap<&'static str, usize>,
}

/// The event graph, built by folding events in id order with [`EventGraph::apply`].
#[derive(Debug, Clone, Default)]
pub struct EventGraph {
    graph: DiGraph<Node, EdgeLabel>,
    last_user: Option<NodeIndex>,
    last_reply_or_reflection: Option<NodeIndex>,
    first_reply_by_commit_text: HashMap<String, NodeIndex>,
    first_open_by_cid: HashMap<String, NodeIndex>,
}

/// A non-empty string field (the reference's `isinstance(x, str) and x`).
fn non_empty_str<'a>(meta: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    meta.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The node id a truthy `about_event` names, with Python's equality: `5`, `5.0` and (for 1)
/// `true` all find node 5 or 1; strings never match an integer node.
fn about_event_id(v: &Value) -> Option<i64> {
    match v {
        Value::Bool(true) => Some(1),
        Value::Number(n) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                    .map(|f| f as i64)
            })
            .filter(|&id| id != 0),
        _ => None,
    }
}

/// What the edge rule ([`edge_rule`]) reads of the events before and notes for the events
/// after: the graph keeps node indices and draws edges, the counting fold ([`GraphCounts`])
/// keeps ids and text digests and counts them. The rule itself is written once.
trait EdgeFacts {
    /// A node as the fold knows it.
    type At: Copy;
    /// The latest user message, and the latest assistant message or reflection.
    fn latest(&mut self) -> (&mut Option<Self::At>, &mut Option<Self::At>);
    /// Reply `at` carries `text` on a `COMMIT:` line.
    fn note_commit_text(&mut self, text: String, at: Self::At);
    /// The first reply that carried `text` on a `COMMIT:` line.
    fn reply_committing(&self, text: &str) -> Option<Self::At>;
    /// `at` opens `cid`.
    fn note_open(&mut self, cid: &str, at: Self::At);
    /// The first open of `cid`.
    fn first_open(&self, cid: &str) -> Option<Self::At>;
    /// The node of event `id`, if there is one.
    fn node_of(&self, id: i64) -> Option<Self::At>;
    /// An edge from `from` (the newer event) to `to`.
    fn edge(&mut self, from: Self::At, to: Self::At, label: EdgeLabel);
}

/// A correction's edges: to each earlier node its `meta.supersedes` list names.
fn supersedes_rule<F: EdgeFacts>(f: &mut F, at: F::At, s: &Seen<'_>) {
    if !s.ev.meta.contains("\"supersedes\"") {
        return;
    }
    let ids = s
        .meta_object()
        .and_then(crate::projection::supersession::supersedes_of);
    for id in ids.unwrap_or_default() {
        if id >= s.ev.id {
            continue;
        }
        if let Some(target) = f.node_of(id) {
            f.edge(at, target, EdgeLabel::Supersedes);
        }
    }
}

/// The edge rules (FORMATS.md §6.2) for the node `at` just added for `ev` (of tracked kind
/// `kind`). The rules read the meta when it is a JSON object (canonical or not; any other
/// reads as `{}`).: the edges it draws to earlier nodes and what it leaves for later
/// events. A reflection about itself gets a loop, as in the reference (its node is there).
fn edge_rule<F: EdgeFacts>(f: &mut F, kind: NodeKind, at: F::At, s: &Seen<'_>) {
    supersedes_rule(f, at, s);
    let str_of = |key: &str| s.meta_object().and_then(|m| non_empty_str(m, key));
    match kind {
        NodeKind::UserMessage => *f.latest().0 = Some(at),
        NodeKind::AssistantMessage => {
            if let Some(user) = *f.latest().0 {
                f.edge(at, user, EdgeLabel::RepliesTo);
            }
            for text in marker::commit_texts(&s.ev.content) {
                f.note_commit_text(text, at);
            }
            *f.latest().1 = Some(at);
        }
        NodeKind::IdentityAdoption => {
            if let Some(anchor) = *f.latest().1 {
                f.edge(at, anchor, EdgeLabel::AdoptsIdentityFor);
            }
        }
        NodeKind::CommitmentOpen => {
            let text = str_of("text");
            if let Some(reply) = text.and_then(|t| f.reply_committing(t)) {
                f.edge(at, reply, EdgeLabel::CommitsTo);
            }
            if let Some(cid) = str_of("cid") {
                f.note_open(cid, at);
            }
        }
        NodeKind::CommitmentClose => {
            let cid = str_of("cid");
            if let Some(open) = cid.and_then(|c| f.first_open(c)) {
                f.edge(at, open, EdgeLabel::Closes);
            }
        }
        NodeKind::Reflection => {
            let about = s
                .meta_object()
                .and_then(|m| about_event_id(m.get("about_event")?));
            if let Some(target) = about.and_then(|id| f.node_of(id)) {
                f.edge(at, target, EdgeLabel::ReflectsOn);
            }
            *f.latest().1 = Some(at);
        }
        NodeKind::SummaryUpdate => {}
    }
}

impl EdgeFacts for EventGraph {
    type At = NodeIndex;
    fn latest(&mut self) -> (&mut Option<NodeIndex>, &mut Option<NodeIndex>) {
        (&mut self.last_user, &mut self.last_reply_or_reflection)
    }
    fn note_commit_text(&mut self, text: String, at: NodeIndex) {
        self.first_reply_by_commit_text.entry(text).or_insert(at);
    }
    fn reply_committing(&self, text: &str) -> Option<NodeIndex> {
        self.first_reply_by_commit_text.get(text).copied()
    }
    fn note_open(&mut self, cid: &str, at: NodeIndex) {
        self.first_open_by_cid.entry(cid.to_string()).or_insert(at);
    }
    fn first_open(&self, cid: &str) -> Option<NodeIndex> {
        self.first_open_by_cid.get(cid).copied()
    }
    fn node_of(&self, id: i64) -> Option<NodeIndex> {
        self.index_of(id)
    }
    fn edge(&mut self, from: NodeIndex, to: NodeIndex, label: EdgeLabel) {
        self.graph.add_edge(from, to, label);
    }
}

impl EventGraph {
    /// Folds one event in. Events of untracked kinds are ignored, and so is an event whose id
    /// is not above the newest node's (the fold runs in id order; a repeat adds nothing, as the
    /// reference's `add_event` ignores a node it has).
    pub fn apply(&mut self, ev: &Event) {
        self.fold(&Seen::new(ev));
    }

    /// [`EventGraph::apply`], the meta parsed at most once for every fold ([`Seen`]).
    pub fn fold(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        let Some(kind) = NodeKind::from_kind(&ev.kind) else {
            return;
        };
        if self
            .graph
            .raw_nodes()
            .last()
            .is_some_and(|n| ev.id <= n.weight.id)
        {
            return;
        }
        let ix = self.graph.add_node(Node { id: ev.id, kind });
        edge_rule(self, kind, ix, s);
    }

    /// Nodes are added in rising id order, so the node list is sorted by id.
    fn index_of(&self, id: i64) -> Option<NodeIndex> {
        self.graph
            .raw_nodes()
            .binary_search_by_key(&id, |n| n.weight.id)
            .ok()
            .map(NodeIndex::new)
    }

    fn id(&self, ix: NodeIndex) -> i64 {
        self.graph[ix].id
    }

    /// The node of event `id`, if that event is in the graph.
    pub fn node(&self, id: i64) -> Option<Node> {
        self.index_of(id).map(|ix| self.graph[ix])
    }

    /// Every node, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = Node> + '_ {
        self.graph.raw_nodes().iter().map(|n| n.weight)
    }

    /// Every edge as `(from, to, label)`, in the order they were made (by `from`, rising).
    pub fn edges(&self) -> impl Iterator<Item = (i64, i64, EdgeLabel)> + '_ {
        self.graph
            .raw_edges()
            .iter()
            .map(|e| (self.id(e.source()), self.id(e.target()), e.weight))
    }

    /// Node and edge counts and nodes per kind (`graph_stats`).
    pub fn stats(&self) -> GraphStats {
        let mut counts = [0usize; NodeKind::ALL.len()];
        for n in self.graph.raw_nodes() {
            counts[n.weight.kind as usize] += 1;
        }
        let counts_by_kind = NodeKind::ALL
            .iter()
            .zip(counts)
            .filter(|(_, c)| *c > 0)
            .map(|(k, c)| (k.as_str(), c))
            .collect();
        GraphStats {
            nodes: self.graph.node_count(),
            edges: self.graph.edge_count(),
            counts_by_kind,
        }
    }

    /// The ids next to event `id` along edges in `direction`, only nodes of `kind` when given;
    /// sorted and unique. Empty when `id` is not a node.
    pub fn neighbors(&self, id: i64, direction: Direction, kind: Option<NodeKind>) -> Vec<i64> {
        let Some(ix) = self.index_of(id) else {
            return Vec::new();
        };
        let mut out = BTreeSet::new();
        let dirs: &[PetDirection] = match direction {
            Direction::In => &[PetDirection::Incoming],
            Direction::Out => &[PetDirection::Outgoing],
            Direction::Both => &[PetDirection::Outgoing, PetDirection::Incoming],
        };
        for &d in dirs {
            for n in self.graph.neighbors_directed(ix, d) {
                if kind.is_none_or(|k| self.graph[n].kind == k) {
                    out.insert(self.id(n));
                }
            }
        }
        out.into_iter().collect()
    }

    /// Ids of the nodes with an edge labelled `label` between them and `ix` in direction `d`
    /// (seen from `ix`), ascending and unique.
    fn linked(&self, ix: NodeIndex, d: PetDirection, label: EdgeLabel) -> Vec<i64> {
        let set: BTreeSet<i64> = self
            .graph
            .edges_directed(ix, d)
            .filter(|e| *e.weight() == label)
            .map(|e| match d {
                PetDirection::Outgoing => self.id(e.target()),
                PetDirection::Incoming => self.id(e.source()),
            })
            .collect();
        set.into_iter().collect()
    }

    /// The thread of commitment `cid` (`thread_for_cid`, FORMATS.md §6.3): the assistant
    /// messages the first open of the cid commits to, the open, the closes of that open, then the
    /// reflections on those assistant messages; each group ascending. Empty when no open has
    /// the cid (`cid` is Python-stripped first).
    pub fn thread(&self, cid: &str) -> Vec<i64> {
        let cid = marker::py_strip(cid);
        let Some(&open) = self.first_open_by_cid.get(cid) else {
            return Vec::new();
        };
        let replies = self.linked(open, PetDirection::Outgoing, EdgeLabel::CommitsTo);
        let closes = self.linked(open, PetDirection::Incoming, EdgeLabel::Closes);
        let mut reflections = BTreeSet::new();
        for &reply in &replies {
            if let Some(ix) = self.index_of(reply) {
                reflections.extend(self.linked(ix, PetDirection::Incoming, EdgeLabel::ReflectsOn));
            }
        }
        let mut thread = replies;
        thread.push(self.id(open));
        thread.extend(closes);
        thread.extend(reflections);
        thread
    }

    /// The thread of `cid` and every direct neighbour of its events, ascending
    /// (`subgraph_for_cid`, what the reference CLI's `/graph explain` prints). Empty when the
    /// thread is.
    pub fn subgraph(&self, cid: &str) -> Vec<i64> {
        let mut set = BTreeSet::new();
        for id in self.thread(cid) {
            set.insert(id);
            set.extend(self.neighbors(id, Direction::Both, None));
        }
        set.into_iter().collect()
    }

    /// Writes the graph as Graphviz DOT: nodes in id order labelled `<id> <kind>`, then edges
    /// in order of their source labelled with their meaning. The same graph gives the same bytes.
    pub fn write_dot<W: Write>(&self, w: &mut W) -> io::Result<()> {
        writeln!(w, "digraph pmm {{")?;
        writeln!(w, "  node [shape=box];")?;
        for n in self.nodes() {
            writeln!(
                w,
                "  {} [label=\"{} {}\", kind=\"{}\"];",
                n.id, n.id, n.kind, n.kind
            )?;
        }
        for (from, to, label) in self.edges() {
            writeln!(w, "  {from} -> {to} [label=\"{label}\"];")?;
        }
        writeln!(w, "}}")
    }

    /// Writes the graph as one line of JSON in networkx's node-link form (so
    /// `networkx.node_link_graph(json.loads(line), edges="links")` reads it back):
    /// `{"type":"graph","directed":true,"multigraph":false,"graph":{},"nodes":[{"id","kind"}…],
    /// "links":[{"source","target","label"}…]}`, nodes in id order, links in order of source.
    /// No trailing newline.
    pub fn write_json<W: Write>(&self, w: &mut W) -> io::Result<()> {
        write!(
            w,
            "{{\"type\":\"graph\",\"directed\":true,\"multigraph\":false,\"graph\":{{}},\"nodes\":["
        )?;
        for (i, n) in self.nodes().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(w, "{sep}{{\"id\":{},\"kind\":\"{}\"}}", n.id, n.kind)?;
        }
        write!(w, "],\"links\":[")?;
        for (i, (from, to, label)) in self.edges().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(
                w,
                "{sep}{{\"source\":{from},\"target\":{to},\"label\":\"{label}\"}}"
            )?;
        }
        write!(w, "]}}")
    }
}

/// The graph's statistics as a small fold, for `pmm-replay --state` and its checkpoints: the
/// same rules as [`EventGraph`] (one edge rule over both; a test checks that their
/// look-ups agree), keeping only what the rules look up — the latest user message, the latest reply or reflection, which COMMIT texts
/// some reply carries, first opens by cid, and a bitset of node ids for `reflects_on` — not the
/// graph. A checkpoint of a 10⁶-event ledger carries ~125 KB of bitset and ~120 KB of text
/// digests (each one byte string in a checkpoint: `packed`) instead of the whole graph.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphCounts {
    nodes: usize,
    edges: usize,
    counts_by_kind: BTreeMap<String, usize>,
    last_node: Option<i64>,
    last_user: Option<i64>,
    last_reply_or_reflection: Option<i64>,
    /// The [`text_digest`] of every text on a `COMMIT:` line of an assistant message so far.
    /// `commits_to` points at the first such reply, but a count only needs to know that one
    /// exists, so neither the reply's id nor the text (~430 KB at 10⁶ events) is kept.
    #[serde(with = "super::packed::digests")]
    commit_texts: BTreeSet<u128>,
    first_open_by_cid: BTreeMap<String, i64>,
    /// Bit `id` is set when event `id` is a node.
    #[serde(with = "super::packed::words")]
    node_bits: Vec<u64>,
}

/// The 128-bit digest [`GraphCounts`] remembers a COMMIT text by: the first 16 bytes of its
/// sha256. Two different texts with the same digest would make an open of one count an edge
/// to a reply carrying only the other; among the ~10⁴ distinct texts of a 10⁶-event ledger
/// the chance of any such pair is below 10⁻³⁰, so it is ignored.
fn text_digest(text: &str) -> u128 {
    let mut head = [0u8; 16];
    head.copy_from_slice(&Sha256::digest(text.as_bytes())[..16]);
    u128::from_be_bytes(head)
}

/// The counting fold's facts: ids, and only whether a reply carried a text (its digest).
impl EdgeFacts for GraphCounts {
    type At = i64;
    fn latest(&mut self) -> (&mut Option<i64>, &mut Option<i64>) {
        (&mut self.last_user, &mut self.last_reply_or_reflection)
    }
    fn note_commit_text(&mut self, text: String, _at: i64) {
        self.commit_texts.insert(text_digest(&text));
    }
    fn reply_committing(&self, text: &str) -> Option<i64> {
        // Which reply does not matter to a count, only that there is one.
        self.commit_texts.contains(&text_digest(text)).then_some(0)
    }
    fn note_open(&mut self, cid: &str, at: i64) {
        self.first_open_by_cid.entry(cid.to_string()).or_insert(at);
    }
    fn first_open(&self, cid: &str) -> Option<i64> {
        self.first_open_by_cid.get(cid).copied()
    }
    fn node_of(&self, id: i64) -> Option<i64> {
        self.is_node(id).then_some(id)
    }
    fn edge(&mut self, _from: i64, _to: i64, _label: EdgeLabel) {
        self.edges += 1;
    }
}

impl GraphCounts {
    fn is_node(&self, id: i64) -> bool {
        id >= 0
            && self
                .node_bits
                .get(id as usize / 64)
                .is_some_and(|w| w & (1u64 << (id as usize % 64)) != 0)
    }

    fn add_node(&mut self, id: i64, kind: NodeKind) {
        if id >= 0 {
            let word = id as usize / 64;
            if self.node_bits.len() <= word {
                self.node_bits.resize(word + 1, 0);
            }
            self.node_bits[word] |= 1u64 << (id as usize % 64);
        }
        self.nodes += 1;
        *self
            .counts_by_kind
            .entry(kind.as_str().to_string())
            .or_default() += 1;
        self.last_node = Some(id);
    }

    /// Folds one event in (events must come in id order; repeats and older ids are ignored).
    pub fn apply(&mut self, ev: &Event) {
        self.fold(&Seen::new(ev));
    }

    /// [`GraphCounts::apply`], the meta parsed at most once for every fold ([`Seen`]).
    pub fn fold(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        let Some(kind) = NodeKind::from_kind(&ev.kind) else {
            return;
        };
        if self.last_node.is_some_and(|last| ev.id <= last) {
            return;
        }
        self.add_node(ev.id, kind);
        edge_rule(self, kind, ev.id, s);
    }

    /// Nodes of `kind`.
    pub fn count_of(&self, kind: NodeKind) -> usize {
        self.counts_by_kind.get(kind.as_str()).copied().unwrap_or(0)
    }

    /// Node and edge counts.
    pub fn size(&self) -> (usize, usize) {
        (self.nodes, self.edges)
    }

    /// The statistics as [`EventGraph::stats`] gives them.
    pub fn graph_stats(&self) -> GraphStats {
        GraphStats {
            nodes: self.nodes,
            edges: self.edges,
            counts_by_kind: NodeKind::ALL
                .iter()
                .filter_map(|k| {
                    let n = self.count_of(*k);
                    (n > 0).then_some((k.as_str(), n))
                })
                .collect(),
        }
    }

    /// `{"nodes","edges","counts_by_kind"}`, as [`EventGraph::stats`] gives it.
    pub fn stats(&self) -> Value {
        serde_json::json!({
            "nodes": self.nodes,
            "edges": self.edges,
            "counts_by_kind": self.counts_by_kind,
        })
    }
}

/// A question about the event graph: what `pmm-graph` asks, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphQuery {
    /// Node and edge counts, nodes per kind.
    Stats,
    /// The events of commitment `cid`'s thread ([`EventGraph::thread`]).
    Thread(String),
    /// The thread and every event directly linked to it ([`EventGraph::subgraph`]).
    Explain(String),
    /// The events linked to event `id` ([`EventGraph::neighbors`]).
    Neighbors {
        /// The event.
        id: i64,
        /// Which links to follow.
        direction: Direction,
        /// Only neighbours of this kind.
        kind: Option<NodeKind>,
    },
    /// The whole graph.
    Export,
}

/// What a [`GraphQuery`] found.
#[derive(Debug)]
pub enum GraphAnswer<'a> {
    /// The statistics.
    Stats(GraphStats),
    /// Event ids, in the order they are shown.
    Events(Vec<i64>),
    /// The whole graph.
    Graph(&'a EventGraph),
}

/// Why a [`GraphQuery`] has no answer (a negative answer, not a failure).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unanswered {
    /// No `commitment_open` has the cid.
    #[error("no thread for cid '{0}': no commitment_open has that cid")]
    NoThread(String),
    /// The ledger has no such event.
    #[error("event {0} is not in the graph: there is no event {0}")]
    NoEvent(i64),
    /// The event is there, of a kind the graph does not track.
    #[error("event {id} is not in the graph: the graph does not track kind '{kind}'")]
    Untracked {
        /// The event.
        id: i64,
        /// Its kind.
        kind: String,
    },
}

/// The fold a [`GraphQuery`] needs, fed every event in id order, then asked for the answer:
/// the statistics need only the counting fold ([`GraphCounts`]: a bitset of node ids, not the
/// graph), so memory stays small however large the ledger; every other query builds the graph.
#[derive(Debug)]
pub struct GraphFold {
    query: GraphQuery,
    fold: Fold,
    /// The kind of the event a neighbours query asks about, once it went by.
    asked_kind: Option<String>,
}

#[derive(Debug)]
enum Fold {
    Counts(GraphCounts),
    Graph(EventGraph),
}

impl GraphFold {
    /// The fold for `query`.
    pub fn new(query: GraphQuery) -> Self {
        let fold = match query {
            GraphQuery::Stats => Fold::Counts(GraphCounts::default()),
            _ => Fold::Graph(EventGraph::default()),
        };
        GraphFold {
            query,
            fold,
            asked_kind: None,
        }
    }

    /// Folds one event in.
    pub fn apply(&mut self, ev: &Event) {
        match &mut self.fold {
            Fold::Counts(c) => c.apply(ev),
            Fold::Graph(g) => g.apply(ev),
        }
        if matches!(self.query, GraphQuery::Neighbors { id, .. } if id == ev.id) {
            self.asked_kind = Some(ev.kind.to_string());
        }
    }

    /// The answer to the query, from the events folded so far.
    pub fn answer(&self) -> Result<GraphAnswer<'_>, Unanswered> {
        let thread = |ids: Vec<i64>, cid: &str| {
            if ids.is_empty() {
                Err(Unanswered::NoThread(cid.to_string()))
            } else {
                Ok(GraphAnswer::Events(ids))
            }
        };
        match (&self.fold, &self.query) {
            (Fold::Counts(c), _) => Ok(GraphAnswer::Stats(c.graph_stats())),
            (Fold::Graph(g), GraphQuery::Stats) => Ok(GraphAnswer::Stats(g.stats())),
            (Fold::Graph(g), GraphQuery::Export) => Ok(GraphAnswer::Graph(g)),
            (Fold::Graph(g), GraphQuery::Thread(cid)) => thread(g.thread(cid), cid),
            (Fold::Graph(g), GraphQuery::Explain(cid)) => thread(g.subgraph(cid), cid),
            (
                Fold::Graph(g),
                GraphQuery::Neighbors {
                    id,
                    direction,
                    kind,
                },
            ) => match (g.node(*id), &self.asked_kind) {
                (Some(_), _) => Ok(GraphAnswer::Events(g.neighbors(*id, *direction, *kind))),
                (None, None) => Err(Unanswered::NoEvent(*id)),
                (None, Some(k)) => Err(Unanswered::Untracked {
                    id: *id,
                    kind: k.clone(),
                }),
            },
        }
    }
}

#[cfg(test)]
impl EventGraph {
    /// The graph of `events` (in id order).
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a Event>) -> EventGraph {
        let mut g = EventGraph::default();
        for ev in events {
            g.apply(ev);
        }
        g
    }
}

#[cfg(test)]
mod counts_tests {
    use super::*;

    #[test]
    fn counts_agree_with_the_graph() {
        let ev = Event::sample;
        let events = [
            ev(1, "user_message", "hi", "{}"),
            ev(2, "assistant_message", "ok\nCOMMIT: do x", "{}"),
            ev(3, "commitment_open", "", r#"{"cid":"c1","text":"do x"}"#),
            ev(4, "reflection", "{}", r#"{"about_event":2}"#),
            ev(5, "metrics_turn", "", "{}"),
            ev(6, "reflection", "{}", r#"{"about_event":5}"#),
            ev(7, "commitment_close", "", r#"{"cid":"c1"}"#),
            ev(8, "identity_adoption", "{}", "{}"),
            ev(9, "reflection", "{}", r#"{"about_event":9}"#),
            ev(9, "user_message", "repeat", "{}"),
            ev(10, "summary_update", "{}", "{}"),
        ];
        let (mut g, mut c) = (EventGraph::default(), GraphCounts::default());
        for e in &events {
            g.apply(e);
            c.apply(e);
        }
        assert_eq!(serde_json::to_value(g.stats()).unwrap(), c.stats());
        assert_eq!(g.stats(), c.graph_stats());
        assert_eq!(c.stats()["edges"], 6);
    }

    #[test]
    fn restored_counts_fold_on_like_uninterrupted_ones() {
        let ev = Event::sample;
        let events = [
            ev(1, "user_message", "hi", "{}"),
            ev(2, "assistant_message", "COMMIT: do x\nCOMMIT: do y", "{}"),
            ev(700, "reflection", "{}", r#"{"about_event":2}"#),
            // After the cut: edges that need the restored digests, cids and node bits.
            ev(701, "commitment_open", "", r#"{"cid":"c1","text":"do y"}"#),
            ev(702, "commitment_open", "", r#"{"cid":"c2","text":"do z"}"#),
            ev(703, "commitment_close", "", r#"{"cid":"c1"}"#),
            ev(704, "reflection", "{}", r#"{"about_event":700}"#),
            ev(705, "reflection", "{}", r#"{"about_event":699}"#),
        ];
        let mut full = GraphCounts::default();
        let mut head = GraphCounts::default();
        for e in &events {
            full.apply(e);
        }
        for e in &events[..3] {
            head.apply(e);
        }
        // Restored from the bytes a projection checkpoint stores (MessagePack).
        let saved = crate::projection::state::Projections {
            graph: head.clone(),
            ..Default::default()
        }
        .to_checkpoint();
        let mut r = crate::projection::state::Projections::from_checkpoint(&saved)
            .expect("the checkpoint reads back")
            .graph;
        assert_eq!(r, head);
        for e in &events[3..] {
            r.apply(e);
        }
        assert_eq!(r, full);
        assert_eq!(full.size(), (8, 5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(id: i64, kind: &str, content: &str, meta: Value) -> Event {
        Event::sample(id, kind, content, &meta.to_string())
    }

    fn sample() -> EventGraph {
        EventGraph::from_events(&[
            ev(1, "user_message", "hi", json!({})),
            ev(
                2,
                "assistant_message",
                "ok\nCOMMIT: a\n COMMIT: b",
                json!({}),
            ),
            ev(3, "commitment_open", "", json!({"cid":"c1","text":"a"})),
            ev(4, "commitment_open", "", json!({"cid":"c2","text":"b"})),
            ev(5, "metrics_turn", "", json!({})),
            ev(6, "reflection", "r", json!({"about_event": 2})),
            ev(7, "identity_adoption", "", json!({})),
            ev(8, "user_message", "again", json!({})),
            ev(9, "assistant_message", "COMMIT: a", json!({})),
            ev(10, "commitment_open", "", json!({"cid":"c1","text":"a"})),
            ev(11, "commitment_close", "", json!({"cid":"c1"})),
            ev(12, "reflection", "", json!({"about_event": "2"})),
            ev(13, "reflection", "", json!({"about_event": 5})),
            ev(14, "reflection", "", json!({"about_event": 2.0})),
            ev(15, "summary_update", "", json!({})),
        ])
    }

    #[test]
    fn edge_rules() {
        let g = sample();
        let edges: Vec<_> = g.edges().collect();
        assert_eq!(
            edges,
            vec![
                (2, 1, EdgeLabel::RepliesTo),
                (3, 2, EdgeLabel::CommitsTo),
                // " COMMIT: b" is indented: the one marker rule counts it, as the turn does.
                (4, 2, EdgeLabel::CommitsTo),
                (6, 2, EdgeLabel::ReflectsOn),
                (7, 6, EdgeLabel::AdoptsIdentityFor),
                (9, 8, EdgeLabel::RepliesTo),
                (10, 2, EdgeLabel::CommitsTo),
                (11, 3, EdgeLabel::Closes),
                (14, 2, EdgeLabel::ReflectsOn),
            ]
        );
        let s = g.stats();
        assert_eq!((s.nodes, s.edges), (14, 9));
        assert_eq!(s.counts_by_kind["reflection"], 4);
        assert!(!s.counts_by_kind.contains_key("metrics_turn"));
    }

    #[test]
    fn queries() {
        let g = sample();
        assert_eq!(g.thread("c1"), vec![2, 3, 11, 6, 14]);
        assert_eq!(g.thread(" c1\n"), vec![2, 3, 11, 6, 14]);
        assert_eq!(g.thread("c2"), vec![2, 4, 6, 14]);
        assert!(g.thread("nope").is_empty());
        assert_eq!(g.subgraph("c1"), vec![1, 2, 3, 4, 6, 7, 10, 11, 14]);
        assert!(g.subgraph("").is_empty());
        assert_eq!(g.neighbors(2, Direction::In, None), vec![3, 4, 6, 10, 14]);
        assert_eq!(g.neighbors(2, Direction::Out, None), vec![1]);
        assert_eq!(
            g.neighbors(2, Direction::Both, Some(NodeKind::Reflection)),
            vec![6, 14]
        );
        assert!(g.neighbors(5, Direction::Both, None).is_empty());
    }

    #[test]
    fn a_repeated_or_older_event_adds_nothing() {
        let mut g = sample();
        let before = g.stats();
        g.apply(&ev(9, "assistant_message", "COMMIT: z", json!({})));
        g.apply(&ev(3, "user_message", "", json!({})));
        assert_eq!(g.stats(), before);
    }

    #[test]
    fn dot_and_json_are_deterministic() {
        let g = sample();
        let mut dot = Vec::new();
        g.write_dot(&mut dot).unwrap();
        let dot = String::from_utf8(dot).unwrap();
        assert!(dot.starts_with("digraph pmm {\n"));
        assert!(dot.contains("  2 [label=\"2 assistant_message\", kind=\"assistant_message\"];\n"));
        assert!(dot.contains("  11 -> 3 [label=\"closes\"];\n"));
        assert!(dot.ends_with("}\n"));
        let mut js = Vec::new();
        g.write_json(&mut js).unwrap();
        let v: Value = serde_json::from_slice(&js).unwrap();
        assert_eq!(v["nodes"].as_array().unwrap().len(), 14);
        assert_eq!(
            v["links"][0],
            json!({"source":2,"target":1,"label":"replies_to"})
        );
    }
}

#[cfg(test)]
mod fold_tests {
    use super::*;
    use serde_json::json;

    fn events() -> Vec<Event> {
        let ev =
            |id, kind, content, meta: Value| Event::sample(id, kind, content, &meta.to_string());
        vec![
            ev(1, "user_message", "hi", json!({})),
            ev(2, "assistant_message", "ok\n  COMMIT: a", json!({})),
            ev(3, "commitment_open", "", json!({"cid":"c1","text":"a"})),
            ev(4, "metrics_turn", "", json!({})),
            ev(5, "reflection", "r", json!({"about_event": 2})),
            ev(6, "commitment_close", "", json!({"cid":"c1"})),
        ]
    }

    fn ask(query: GraphQuery) -> Result<Vec<i64>, Unanswered> {
        let mut fold = GraphFold::new(query);
        for e in &events() {
            fold.apply(e);
        }
        fold.answer().map(|a| match a {
            GraphAnswer::Events(ids) => ids,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn stats_come_from_the_counting_fold_and_agree_with_the_graph() {
        let mut fold = GraphFold::new(GraphQuery::Stats);
        assert!(matches!(fold.fold, Fold::Counts(_)));
        for e in &events() {
            fold.apply(e);
        }
        let GraphAnswer::Stats(stats) = fold.answer().unwrap() else {
            panic!()
        };
        assert_eq!(stats, EventGraph::from_events(&events()).stats());
        assert_eq!((stats.nodes, stats.edges), (5, 4));
    }

    #[test]
    fn threads_and_explanations_answer_with_ids_or_say_there_is_none() {
        assert_eq!(ask(GraphQuery::Thread("c1".into())), Ok(vec![2, 3, 6, 5]));
        assert_eq!(
            ask(GraphQuery::Explain("c1".into())),
            Ok(vec![1, 2, 3, 5, 6])
        );
        let none = ask(GraphQuery::Thread("nope".into())).unwrap_err();
        assert_eq!(none, Unanswered::NoThread("nope".into()));
        assert_eq!(
            none.to_string(),
            "no thread for cid 'nope': no commitment_open has that cid"
        );
        assert_eq!(
            ask(GraphQuery::Explain("nope".into())),
            Err(Unanswered::NoThread("nope".into()))
        );
    }

    #[test]
    fn neighbors_name_why_an_event_is_not_a_node() {
        let neighbors = |id, kind| GraphQuery::Neighbors {
            id,
            direction: Direction::Both,
            kind,
        };
        assert_eq!(ask(neighbors(2, None)), Ok(vec![1, 3, 5]));
        assert_eq!(ask(neighbors(2, Some(NodeKind::Reflection))), Ok(vec![5]));
        let untracked = ask(neighbors(4, None)).unwrap_err();
        assert_eq!(
            untracked.to_string(),
            "event 4 is not in the graph: the graph does not track kind 'metrics_turn'"
        );
        let absent = ask(neighbors(99, None)).unwrap_err();
        assert_eq!(
            absent.to_string(),
            "event 99 is not in the graph: there is no event 99"
        );
    }

    #[test]
    fn export_answers_with_the_whole_graph() {
        let mut fold = GraphFold::new(GraphQuery::Export);
        for e in &events() {
            fold.apply(e);
        }
        let GraphAnswer::Graph(g) = fold.answer().unwrap() else {
            panic!()
        };
        let mut fresh = Vec::new();
        EventGraph::from_events(&events())
            .write_json(&mut fresh)
            .unwrap();
        let mut got = Vec::new();
        g.write_json(&mut got).unwrap();
        assert_eq!(got, fresh);
    }
}
