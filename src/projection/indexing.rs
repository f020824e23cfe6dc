//! The indexer's rules (docs/autonomy.md, "The indexer"; FORMATS.md §14.5, the reference's
//! archivist): what an `index` tick derives from the messages of its batch and the concept
//! layer as it stands before the tick, as the list of events to append. Pure, so that the tick
//! (`kernel::index`) writes exactly [`plan`]'s events and `pmm-verify --deep`
//! (`audit::indexed`) recomputes them with the same function.
//!
//! Rules are versioned: the tick records the one it used in its meta (`index_rule`); a tick
//! without it used rule 1. A rule never changes once written; a new way of extracting is a new
//! rule, and the old ones stay here so that old ledgers keep verifying.
//!
//! - **Rule 1** (pmm until 2026-11): fourteen keywords → eight `topic.*` tokens, one
//!   `concept_bind_async` per message with topics, the reply's topics bound to the threads its
//!   `COMMIT:` lines opened, and the safe claims ("my name is", "i live in", "i use").
//! - **Rule 2**: what people talk about. Per message: the keyword topics; the *names* it says
//!   (runs of capitalised words not at a sentence start, `entity.*`); the defined concepts it
//!   mentions (every segment word of the token's last segment is a word of the message); and
//!   the *recurring terms* of the batch (a word of three letters or more that is no stop or
//!   filler word and occurs in two messages of the batch or more, `topic.*`). At most
//!   [`MAX_MESSAGE_TOKENS`] per message, of which [`MAX_NEW_PER_MESSAGE`] new ones (defined
//!   first).
//!   A reply's `COMMIT:` threads are bound to the concepts their text mentions (or whose
//!   keywords it has); two concepts bound together to [`RELATE_AFTER`] events or more are related (`concept_relate`,
//!   `co_occurs_with`), at most [`MAX_RELATES`] a tick. The claims are rule 1's.
//! - **Rule 3** (2026-11-28): rule 2, reading a message without its speaker label
//!   ("Caroline: …", one to three capitalised words and `": "`, as transcripts and imported
//!   chats write it: [`speaker_label`]) and taking no contraction of a stop word ("I'm",
//!   "I've", "Don't") for a name or a term. Under rule 2 a labelled speaker's name was bound to
//!   every message the speaker wrote (79 % of a LoCoMo conversation's), which tells nothing
//!   about any of them, and "I'm" was a name.

use super::concepts::ConceptGraph;
use crate::canon;
use crate::event::{Kind, Source};
use crate::formats::stop::is_stop_word;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The rule this build writes.
pub const RULE: i64 = 3;
/// Messages one `index` tick takes.
pub const BATCH: usize = 16;
/// Rule 2: the most concepts bound to one message.
pub const MAX_MESSAGE_TOKENS: usize = 8;
/// Rule 2: the most concepts one message brings into being.
pub const MAX_NEW_PER_MESSAGE: usize = 4;
/// Rule 2: the most concepts one tick defines ([`MAX_NEW_PER_MESSAGE`] for each message).
pub const MAX_NEW_CONCEPTS: usize = MAX_NEW_PER_MESSAGE * BATCH;
/// Rule 2: two concepts bound together to this many events are related.
pub const RELATE_AFTER: usize = 3;
/// Rule 2: the most relations one tick writes.
pub const MAX_RELATES: usize = 8;
/// Rule 2's relation between concepts that keep appearing together.
pub const CO_OCCURS: &str = "co_occurs_with";

/// The `source` of the indexer's events, as the reference names it.
pub const SOURCE: Source = Source::Indexer;
/// The source of the thread backfill's bindings, as the reference names it.
pub const BACKFILL: Source = Source::IndexerBackfill;

/// A message of the batch.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// Its id.
    pub id: i64,
    /// Its kind (only user and assistant messages are indexed).
    pub kind: &'a Kind,
    /// Its text.
    pub content: &'a str,
}

/// An event the indexer appends.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// Its kind.
    pub kind: Kind,
    /// Its content.
    pub content: String,
    /// Its meta.
    pub meta: Map<String, Value>,
}

/// What the plan reads besides the concept graph: whether a commitment cid was ever opened
/// (open or closed in the mirror).
pub type Known<'a> = &'a dyn Fn(&str) -> bool;

/// The events an `index` tick of rule `rule` appends for `batch` (its evidence, read by id, in
/// the tick's order), given the concept graph `g` and the commitments `known` before the
/// tick. `None` for a rule this build does not know.
pub fn plan(
    rule: i64,
    g: &ConceptGraph,
    known: Known<'_>,
    batch: &[Message<'_>],
) -> Option<Vec<Planned>> {
    let messages: Vec<Message<'_>> = batch
        .iter()
        .take(BATCH)
        .filter(|m| matches!(m.kind, Kind::UserMessage | Kind::AssistantMessage))
        .copied()
        .collect();
    let mut p = Plan {
        g,
        known,
        out: Vec::new(),
        defined: BTreeSet::new(),
        threads: BTreeSet::new(),
    };
    match rule {
        1 => messages.iter().for_each(|m| p.rule_1(m)),
        2 | 3 => p.rule_2(&messages, rule),
        _ => return None,
    }
    Some(p.out)
}

/// Keyword → topic token, with the token's one-line definition (rule 1; the reference's fuzzy
/// concepts).
const TOPICS: [(&str, &str, &str); 14] = [
    (
        "python",
        "topic.programming.python",
        "The Python programming language",
    ),
    (
        "code",
        "topic.programming",
        "Writing and reading program code",
    ),
    (
        "coding",
        "topic.programming",
        "Writing and reading program code",
    ),
    (
        "memory",
        "topic.system.memory",
        "Memory: what is kept and recalled",
    ),
    (
        "bug",
        "topic.system.issue",
        "A defect, error or problem in a system",
    ),
    (
        "error",
        "topic.system.issue",
        "A defect, error or problem in a system",
    ),
    ("slow", "metric.performance", "How fast something runs"),
    ("fast", "metric.performance", "How fast something runs"),
    ("linux", "topic.os.linux", "The Linux operating system"),
    ("ubuntu", "topic.os.linux", "The Linux operating system"),
    ("arch", "topic.os.linux", "The Linux operating system"),
    ("goal", "topic.planning", "Goals, plans and what comes next"),
    ("plan", "topic.planning", "Goals, plans and what comes next"),
    (
        "plans",
        "topic.planning",
        "Goals, plans and what comes next",
    ),
];

/// Words that make a message too uncertain for a claim.
const HEDGES: [&str; 10] = [
    "might", "maybe", "could", "should", "would", "think", "guess", "wish", "probably", "possibly",
];

/// Lowercase words, with `.,!?;:()[]"'` as spaces (§14.5).
fn words(text: &str) -> Vec<String> {
    let cleaned: String = text
        .to_lowercase()
        .chars()
        .map(|c| if ".,!?;:()[]\"'".contains(c) { ' ' } else { c })
        .collect();
    cleaned.split_whitespace().map(str::to_string).collect()
}

/// The keyword topic tokens of a message, sorted and unique.
pub fn topics(text: &str) -> Vec<&'static str> {
    let w = words(text);
    let mut t: Vec<&str> = TOPICS
        .iter()
        .filter(|(k, _, _)| w.iter().any(|x| x == k))
        .map(|(_, tok, _)| *tok)
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}

/// The safe claims of a message: `(claim_type, confidence, value)` for "my name is X",
/// "i live in A \[B \[C\]\]" and "i use X"; none when the message hedges.
pub fn claims(text: &str) -> Vec<(&'static str, f64, String)> {
    let w = words(text);
    if w.iter().any(|x| HEDGES.contains(&x.as_str())) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for i in 0..w.len() {
        let at = |j: usize| w.get(i + j).map(String::as_str);
        if (at(0), at(1), at(2)) == (Some("my"), Some("name"), Some("is")) {
            if let Some(x) = at(3) {
                out.push(("user.identity.name", 0.95, x.to_string()));
            }
        }
        if (at(0), at(1), at(2)) == (Some("i"), Some("live"), Some("in")) && at(3).is_some() {
            let place: Vec<&str> = (3..6).filter_map(at).collect();
            out.push(("user.location", 0.9, place.join(" ")));
        }
        if (at(0), at(1)) == (Some("i"), Some("use")) {
            if let Some(x) = at(2) {
                out.push(("user.tool_usage", 0.9, x.to_string()));
            }
        }
    }
    out
}

/// Whether a word is one of rule 1's keywords (its keyword topic stands for it).
fn is_keyword(word: &str) -> bool {
    TOPICS.iter().any(|(k, _, _)| *k == word)
}

fn keyword_definition(token: &str) -> Option<&'static str> {
    TOPICS
        .iter()
        .find(|(_, t, _)| *t == token)
        .map(|(_, _, d)| *d)
}

fn meta(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// A plan in the making: what it appends, and what its own events changed of the state the
/// writer would see (the tick folds each event as it appends it).
struct Plan<'g> {
    g: &'g ConceptGraph,
    known: Known<'g>,
    out: Vec<Planned>,
    /// Tokens this plan defined (as written).
    defined: BTreeSet<String>,
    /// `(cid, canonical token)` thread bindings this plan made.
    threads: BTreeSet<(String, String)>,
}

impl Plan<'_> {
    fn push(&mut self, kind: Kind, v: &Value, m: Map<String, Value>) {
        let content = canon::built(v);
        self.out.push(Planned {
            kind,
            content,
            meta: m,
        });
    }

    /// Whether `token` is defined, as the writer's fold would say after this plan's events.
    fn is_defined(&self, token: &str) -> bool {
        self.g.definition(token).is_some() || self.defined.contains(self.g.canonical_token(token))
    }

    fn define(&mut self, token: &str, kind: &str, definition: &str, at: i64) {
        let def = json!({
            "attributes": {}, "concept_kind": kind, "definition": definition,
            "token": token, "version": 1,
        });
        let id = crate::chain::Digest::of(canon::built(&def).as_bytes());
        let m = meta(&[
            ("concept_id", id.to_string().into()),
            ("source", SOURCE.into()),
            ("source_event", at.into()),
        ]);
        self.push(Kind::ConceptDefine, &def, m);
        self.defined.insert(token.to_string());
    }

    fn bind(&mut self, m: &Message<'_>, tokens: &[String]) {
        let v = json!({"confidence": 0.75, "event_id": m.id, "relation": "inferred_topic", "tokens": tokens});
        let pairs = [("origin", Source::Async.into()), ("source", SOURCE.into())];
        self.push(Kind::ConceptBindAsync, &v, meta(&pairs));
    }

    fn bind_thread(&mut self, cid: &str, token: &str) {
        let canonical = self.g.canonical_token(token).to_string();
        if self.g.is_bound_to_thread(token, cid)
            || self.threads.contains(&(cid.to_string(), canonical.clone()))
        {
            return;
        }
        let v = json!({"cid": cid, "relation": "relevant_to", "tokens": [token]});
        self.push(
            Kind::ConceptBindThread,
            &v,
            meta(&[("source", BACKFILL.into())]),
        );
        self.threads.insert((cid.to_string(), canonical));
    }

    fn claims(&mut self, m: &Message<'_>) {
        for (claim_type, confidence, value) in claims(m.content) {
            let evidence: String = m.content.chars().take(50).collect();
            let v = json!({
                "claim_type": claim_type, "confidence": confidence, "evidence_text": evidence,
                "source_event_id": m.id, "value": value,
            });
            let pairs = [("origin", Source::Async.into()), ("source", SOURCE.into())];
            self.push(Kind::ClaimFromText, &v, meta(&pairs));
        }
    }

    /// The commitments a reply's `COMMIT:` lines opened that the ledger knows, with their text.
    fn threads_of(&self, m: &Message<'_>) -> Vec<(String, String)> {
        if *m.kind != Kind::AssistantMessage {
            return Vec::new();
        }
        crate::marker::parse(m.content)
            .commits
            .into_iter()
            .map(|c| (super::mirror::commitment_cid(&c.value), c.value))
            .filter(|(cid, _)| (self.known)(cid))
            .collect()
    }

    /// Rule 1, one message: its keyword topics defined (when new) and bound, bound to the
    /// threads its `COMMIT:` lines opened, and its claims.
    fn rule_1(&mut self, m: &Message<'_>) {
        let tokens = topics(m.content);
        for tok in &tokens {
            if self.is_defined(tok) {
                continue;
            }
            self.define(tok, "topic", keyword_definition(tok).unwrap_or(""), m.id);
        }
        if !tokens.is_empty() {
            let owned: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
            self.bind(m, &owned);
            for (cid, _) in self.threads_of(m) {
                for tok in &tokens {
                    self.bind_thread(&cid, tok);
                }
            }
        }
        self.claims(m);
    }

    /// Rules 2 and 3 (`rule`), the whole batch (see the module docs).
    fn rule_2(&mut self, messages: &[Message<'_>], rule: i64) {
        let scanned: Vec<Scanned> = messages.iter().map(|m| scan(m.content, rule)).collect();
        // The batch's names (their single words too: a name is not also a topic).
        let name_words: BTreeSet<String> = scanned
            .iter()
            .flat_map(|s| s.names.iter())
            .flat_map(|(t, _)| t.split('_').map(str::to_string).collect::<Vec<_>>())
            .collect();
        // In how many messages of the batch each term occurs.
        let mut df: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &scanned {
            for t in &s.terms {
                *df.entry(t.as_str()).or_default() += 1;
            }
        }
        let defined = self.g.all_tokens();
        let mut new_count = 0;
        let mut bound: Vec<(i64, Vec<String>)> = Vec::new();
        for (m, s) in messages.iter().zip(&scanned) {
            // Candidates in order: keyword topics, names, mentioned concepts, recurring terms;
            // each with the definition it would get when new.
            let mut cands: Vec<(String, &'static str, String)> = Vec::new();
            for tok in topics(m.content) {
                let def = keyword_definition(tok).unwrap_or("");
                cands.push((tok.to_string(), "topic", def.to_string()));
            }
            for (tok, surface) in s.names.iter().filter(|(t, _)| !is_keyword(t)) {
                let def = format!("{surface} (a name, first met at event {})", m.id);
                cands.push((format!("entity.{tok}"), "entity", def));
            }
            for tok in mentioned(&defined, &s.words, rule) {
                cands.push((tok, "topic", String::new()));
            }
            for t in &s.terms {
                let recurring = df.get(t.as_str()).is_some_and(|n| *n >= 2);
                if recurring
                    && !is_keyword(t)
                    && !name_words.contains(t)
                    && !self.is_defined(&format!("entity.{t}"))
                {
                    let def = format!("{t} (a recurring topic, first met at event {})", m.id);
                    cands.push((format!("topic.{t}"), "topic", def));
                }
            }
            let mut tokens: Vec<String> = Vec::new();
            let mut new_here = 0;
            for (tok, kind, def) in cands {
                if tokens.len() == MAX_MESSAGE_TOKENS || tokens.contains(&tok) {
                    continue;
                }
                if !self.is_defined(&tok) {
                    if new_here == MAX_NEW_PER_MESSAGE || new_count == MAX_NEW_CONCEPTS {
                        continue;
                    }
                    new_here += 1;
                    new_count += 1;
                    self.define(&tok, kind, &def, m.id);
                }
                tokens.push(tok);
            }
            tokens.sort();
            if !tokens.is_empty() {
                self.bind(m, &tokens);
                for (cid, text) in self.threads_of(m) {
                    let (said, keywords) = (word_set(&text), topics(&text));
                    for tok in &tokens {
                        if mentions(tok, &said) || keywords.contains(&tok.as_str()) {
                            self.bind_thread(&cid, tok);
                        }
                    }
                }
                bound.push((m.id, tokens));
            }
            self.claims(m);
        }
        self.relate(&bound);
    }

    /// Relations between the concepts bound together in this batch that, with the bindings
    /// before it, are bound together to [`RELATE_AFTER`] events or more and are not related
    /// yet: the most bound first, then by token.
    fn relate(&mut self, bound: &[(i64, Vec<String>)]) {
        let mut pairs: BTreeMap<(String, String), BTreeSet<i64>> = BTreeMap::new();
        for (id, tokens) in bound {
            for (i, a) in tokens.iter().enumerate() {
                for b in &tokens[i + 1..] {
                    let key = (a.clone(), b.clone());
                    pairs.entry(key).or_default().insert(*id);
                }
            }
        }
        let mut due: Vec<(usize, String, String)> = pairs
            .into_iter()
            .filter(|((a, b), _)| !self.g.related(a, b, CO_OCCURS))
            .map(|((a, b), here)| {
                let before = self.g.co_bound(&a, &b);
                let new = here
                    .iter()
                    .filter(|id| !(self.g.is_bound(&a, **id) && self.g.is_bound(&b, **id)))
                    .count();
                (before + new, a, b)
            })
            .filter(|(n, _, _)| *n >= RELATE_AFTER)
            .collect();
        due.sort_by(|x, y| y.0.cmp(&x.0).then_with(|| (&x.1, &x.2).cmp(&(&y.1, &y.2))));
        for (n, a, b) in due.into_iter().take(MAX_RELATES) {
            let v = json!({"from": a, "relation": CO_OCCURS, "to": b, "weight": n});
            self.push(Kind::ConceptRelate, &v, meta(&[("source", SOURCE.into())]));
        }
    }
}

/// Words no name is made of and no topic is about: greetings, time words, the conversational
/// filler of chat (rule 2, beside the stop words). Lowercase, sorted.
const FILLER: &[&str] = &[
    "able",
    "absolutely",
    "actually",
    "ago",
    "almost",
    "already",
    "also",
    "always",
    "amazing",
    "another",
    "anyone",
    "anything",
    "anyway",
    "anywhere",
    "april",
    "around",
    "august",
    "awesome",
    "back",
    "basically",
    "best",
    "better",
    "big",
    "bit",
    "bye",
    "came",
    "certainly",
    "come",
    "coming",
    "cool",
    "day",
    "days",
    "december",
    "definitely",
    "done",
    "dr",
    "early",
    "else",
    "enough",
    "especially",
    "even",
    "ever",
    "every",
    "everyone",
    "everything",
    "everywhere",
    "exactly",
    "excited",
    "far",
    "february",
    "feel",
    "feeling",
    "felt",
    "finally",
    "find",
    "first",
    "friday",
    "fun",
    "gave",
    "get",
    "getting",
    "give",
    "glad",
    "going",
    "gone",
    "good",
    "got",
    "gotten",
    "great",
    "guess",
    "happy",
    "hear",
    "hello",
    "help",
    "hey",
    "hi",
    "honestly",
    "hope",
    "hopefully",
    "january",
    "july",
    "june",
    "keep",
    "kind",
    "know",
    "last",
    "lately",
    "least",
    "left",
    "less",
    "let",
    "like",
    "literally",
    "little",
    "lol",
    "long",
    "look",
    "looking",
    "lot",
    "lots",
    "love",
    "luckily",
    "made",
    "make",
    "makes",
    "making",
    "many",
    "march",
    "may",
    "maybe",
    "mean",
    "might",
    "monday",
    "mr",
    "mrs",
    "ms",
    "much",
    "must",
    "nah",
    "need",
    "never",
    "new",
    "next",
    "nice",
    "nothing",
    "november",
    "october",
    "okay",
    "old",
    "omg",
    "one",
    "part",
    "people",
    "please",
    "pretty",
    "probably",
    "put",
    "quite",
    "rather",
    "really",
    "recently",
    "right",
    "said",
    "saturday",
    "saw",
    "say",
    "see",
    "september",
    "seriously",
    "set",
    "simply",
    "since",
    "somebody",
    "someone",
    "something",
    "sometimes",
    "somewhere",
    "soon",
    "sorry",
    "sounds",
    "st",
    "start",
    "started",
    "still",
    "stuff",
    "sunday",
    "super",
    "sure",
    "take",
    "tell",
    "thank",
    "thanks",
    "thing",
    "things",
    "think",
    "though",
    "thought",
    "thursday",
    "time",
    "times",
    "today",
    "together",
    "tomorrow",
    "took",
    "totally",
    "tried",
    "try",
    "trying",
    "tuesday",
    "use",
    "usually",
    "wanna",
    "want",
    "wanted",
    "way",
    "wednesday",
    "week",
    "weekend",
    "well",
    "went",
    "whole",
    "wonderful",
    "wow",
    "yay",
    "yeah",
    "year",
    "years",
    "yep",
    "yes",
    "yesterday",
    "yet",
];

fn is_filler(w: &str) -> bool {
    FILLER.binary_search(&w).is_ok()
}

/// The marker keywords, which begin control lines and name nothing.
const MARKERS: [&str; 5] = ["close", "claim", "commit", "ref", "reflect"];

/// What rule 2 reads of a message: its names (`(token words joined by _, as written)`, in
/// order of appearance, unique), its terms (unique, in order) and all its words (lowercase,
/// with their singulars, for mentions: [`word_set`]).
#[derive(Debug, Default, PartialEq)]
struct Scanned {
    names: Vec<(String, String)>,
    terms: Vec<String>,
    words: BTreeSet<String>,
    /// The names and terms so far, as tokens (for uniqueness).
    seen: BTreeSet<String>,
}

/// A word as written, whether a sentence starts with it, and whether only spaces separate it
/// from the word before.
struct Word<'a> {
    text: &'a str,
    start: bool,
    joined: bool,
}

/// The words of `text`: runs of letters and digits, with an apostrophe or hyphen between two
/// of them kept inside; a possessive `'s` and trailing apostrophes dropped. A sentence starts
/// at the text's start and after `.`, `!`, `?`, `:` or a line break.
fn split_words(text: &str) -> Vec<Word<'_>> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let inner = |c: char| matches!(c, '\'' | '\u{2019}' | '-');
    let mut out = Vec::new();
    let (mut start, mut joined) = (true, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i].1;
        if !c.is_alphanumeric() {
            if matches!(c, '.' | '!' | '?' | ':' | '\n' | '\r') {
                start = true;
            }
            joined = joined && c == ' ';
            i += 1;
            continue;
        }
        let from = chars[i].0;
        let mut j = i;
        while j < chars.len() {
            let cj = chars[j].1;
            let inside =
                inner(cj) && j > i && chars.get(j + 1).is_some_and(|(_, n)| n.is_alphanumeric());
            if cj.is_alphanumeric() || inside {
                j += 1;
            } else {
                break;
            }
        }
        let to = chars.get(j).map_or(text.len(), |(b, _)| *b);
        let mut w = &text[from..to];
        for suffix in ["'s", "\u{2019}s"] {
            if w.len() > suffix.len() {
                w = w.strip_suffix(suffix).unwrap_or(w);
            }
        }
        out.push(Word {
            text: w,
            start,
            joined,
        });
        start = false;
        joined = true;
        i = j;
    }
    out
}

/// Whether a word reads as (part of) a name: a capital and then a lowercase letter somewhere,
/// or an acronym of two to six capitals; letters only.
fn capitalised(w: &str) -> bool {
    let mut cs = w.chars();
    let Some(first) = cs.next() else {
        return false;
    };
    if !first.is_uppercase()
        || !w
            .chars()
            .all(|c| c.is_alphabetic() || c == '-' || c == '\'')
    {
        return false;
    }
    let n = w.chars().count();
    w.chars().any(char::is_lowercase) || ((2..=6).contains(&n) && w.chars().all(char::is_uppercase))
}

/// Rule 2's singular of a term: `stories` → `story`, `tomatoes` → `tomato`, `watches` →
/// `watch`, `reports` → `report` (five letters or more; not `-ss`, `-us`, `-is`).
fn singular(w: &str) -> String {
    let n = w.chars().count();
    if n >= 5 {
        if let Some(stem) = w.strip_suffix("ies") {
            return format!("{stem}y");
        }
        let es = ["oes", "ches", "shes", "xes", "sses"];
        if (n >= 7 || !w.ends_with("oes")) && es.iter().any(|e| w.ends_with(e)) {
            return w[..w.len() - 2].to_string();
        }
        if w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
            return w[..w.len() - 1].to_string();
        }
    }
    w.to_string()
}

/// Whether a lowercase word is no name and no term under `rule`: a stop word, a filler word
/// or a marker; from rule 3 also a contraction of a stop word ("i'm", "don't").
fn excluded(lower: &str, rule: i64) -> bool {
    let contraction = || {
        lower
            .split_once(['\'', '\u{2019}'])
            .is_some_and(|(head, _)| is_stop_word(head))
    };
    is_stop_word(lower)
        || is_filler(lower)
        || MARKERS.contains(&lower)
        || (rule >= 3 && contraction())
}

/// The longest speaker label rule 3 cuts, in characters.
pub const MAX_LABEL: usize = 40;

/// The speaker label `text` begins with, as rule 3 reads it: one to three words, each a
/// capital letter and then letters, digits, `.`, `-` or `'`, followed by `": "`, at most
/// [`MAX_LABEL`] characters ("Melanie: …", "Dr Kim: …"). Part of the rule: recall's own
/// reading of labels (`recall::speakers::label`, the same today) may change, this may not.
pub fn speaker_label(text: &str) -> Option<&str> {
    let (head, _) = text.split_once(": ")?;
    let n = head.split(' ').count();
    let ok = (1..=3).contains(&n)
        && head.chars().count() <= MAX_LABEL
        && head.split(' ').all(|w| {
            let mut cs = w.chars();
            cs.next().is_some_and(char::is_uppercase)
                && cs.all(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '\''))
        });
    ok.then_some(head)
}

/// What rule `rule` (2 or 3) reads of a text (see [`Scanned`]).
fn scan(text: &str, rule: i64) -> Scanned {
    let text = match speaker_label(text) {
        Some(label) if rule >= 3 => &text[label.len() + 2..],
        _ => text,
    };
    let words = split_words(text);
    let mut s = Scanned::default();
    // Names: runs of capitalised words joined by spaces, cut at excluded words; a run that
    // starts a sentence loses its first word.
    let mut run: Vec<&Word<'_>> = Vec::new();
    let flush = |run: &mut Vec<&Word<'_>>, s: &mut Scanned| {
        if run.first().is_some_and(|w| w.start) {
            run.remove(0);
        }
        if !run.is_empty() {
            let parts: Vec<String> = run.iter().take(4).map(|w| w.text.to_lowercase()).collect();
            let surface: Vec<&str> = run.iter().take(4).map(|w| w.text).collect();
            let token = parts.join("_");
            if !token.is_empty() && s.seen.insert(format!("entity.{token}")) {
                s.names.push((token, surface.join(" ")));
            }
        }
        run.clear();
    };
    for w in &words {
        let lower = w.text.to_lowercase();
        let name_word = capitalised(w.text) && !excluded(&lower, rule);
        if !(name_word && w.joined && !run.is_empty()) {
            flush(&mut run, &mut s);
        }
        if name_word {
            run.push(w);
        }
    }
    flush(&mut run, &mut s);
    for w in &words {
        let lower = w.text.to_lowercase();
        s.words.insert(singular(&lower));
        s.words.insert(lower.clone());
        // Terms: lowercase words, and capitalised ones that only start a sentence.
        let first_lower = w.text.chars().next().is_some_and(char::is_lowercase);
        let n = lower.chars().count();
        if (first_lower || w.start)
            && (3..=32).contains(&n)
            && lower.chars().all(char::is_alphabetic)
            && !excluded(&lower, rule)
        {
            let t = singular(&lower);
            if !excluded(&t, rule) && s.seen.insert(format!("topic.{t}")) {
                s.terms.push(t);
            }
        }
    }
    s
}

/// The lowercase words of a text as rule 2 reads them, with the singular of each.
fn word_set(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for w in split_words(text) {
        let lower = w.text.to_lowercase();
        out.insert(singular(&lower));
        out.insert(lower);
    }
    out
}

/// Whether a text with `words` ([`word_set`]) mentions `token`: every part (split on anything
/// not a letter or digit) of the token's last dot-segment is one of its words or their
/// singulars.
fn mentions(token: &str, words: &BTreeSet<String>) -> bool {
    let last = token.rsplit('.').next().unwrap_or(token).to_lowercase();
    let mut parts = last
        .split(|c: char| !c.is_alphanumeric())
        .filter(|p| !p.is_empty())
        .peekable();
    parts.peek().is_some() && parts.all(|p| words.contains(p))
}

/// The defined tokens (sorted) a text with `words` mentions, leaving out the ones whose last
/// segment is a stop or filler word, or shorter than three characters.
fn mentioned(defined: &[String], words: &BTreeSet<String>, rule: i64) -> Vec<String> {
    defined
        .iter()
        .filter(|t| {
            let last = t.rsplit('.').next().unwrap_or(t).to_lowercase();
            last.chars().count() >= 3 && !excluded(&last, rule) && mentions(t, words)
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_lists_are_sorted_and_the_stop_list_is_rule_2s() {
        assert!(FILLER.windows(2).all(|w| w[0] < w[1]));
        use sha2::Digest as _;
        let joined = crate::formats::stop::STOP.join("\n");
        let d = format!("{:x}", sha2::Sha256::digest(joined.as_bytes()));
        assert_eq!(
            d, "954619426791d1edba6dde5837e2349fbdd76562a70ff73dda3ea75083ff9d15",
            "formats::stop::STOP is part of index rule 2: keep this list for it and make a new rule"
        );
    }

    #[test]
    fn topics_and_safe_claims() {
        assert_eq!(
            topics("My Python code is slow; a memory bug?"),
            vec![
                "metric.performance",
                "topic.programming",
                "topic.programming.python",
                "topic.system.issue",
                "topic.system.memory"
            ]
        );
        assert_eq!(
            claims("Hi! My name is Ada. I live in New York City now, and I use Arch."),
            vec![
                ("user.identity.name", 0.95, "ada".to_string()),
                ("user.location", 0.9, "new york city".to_string()),
                ("user.tool_usage", 0.9, "arch".to_string()),
            ]
        );
        assert!(
            claims("I think my name is Bob").is_empty(),
            "a hedge: no claim"
        );
    }

    /// Whatever the text, a tick's events are bounded: 8 concepts a message, 4 of them new
    /// (64 definitions a tick), 8 relations a tick, names of at most 4 words.
    #[test]
    fn a_flood_of_names_and_terms_stays_bounded() {
        let alpha = |mut i: usize| {
            let mut w = String::from("x");
            while i > 0 {
                w.push((b'a' + (i % 26) as u8) as char);
                i /= 26;
            }
            w
        };
        let texts: Vec<String> = (0..20)
            .map(|m| {
                (0..5000)
                    .map(|i| format!("and N{}, term{} ", alpha(i + 5000 * m), alpha(i % 50)))
                    .collect()
            })
            .collect();
        let batch: Vec<Message<'_>> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| Message {
                id: i as i64 + 1,
                kind: &Kind::UserMessage,
                content: t,
            })
            .collect();
        let g = ConceptGraph::default();
        let out = plan(RULE, &g, &|_| false, &batch).unwrap();
        let count = |k: Kind| out.iter().filter(|e| e.kind == k).count();
        assert_eq!(count(Kind::ConceptDefine), MAX_NEW_CONCEPTS);
        assert_eq!(count(Kind::ConceptBindAsync), BATCH);
        assert!(count(Kind::ConceptRelate) <= MAX_RELATES);
        for e in out.iter().filter(|e| e.kind == Kind::ConceptBindAsync) {
            let v: Value = serde_json::from_str(&e.content).unwrap();
            assert!(v["tokens"].as_array().unwrap().len() <= MAX_MESSAGE_TOKENS);
        }
        let long = scan("see Alpha Beta Gamma Delta Epsilon Zeta", RULE);
        assert_eq!(long.names[0].0, "alpha_beta_gamma_delta");
        assert!(plan(99, &g, &|_| false, &batch).is_none());
    }

    #[test]
    fn names_are_capitalised_runs_not_at_a_sentence_start() {
        let s = scan(
            "Caroline: I flew to Lisbon with Ana Sousa last May. New York was cold! We met Dr. Reyes at the LGBTQ center; Mel's cat too.",
            2,
        );
        let names: Vec<&str> = s.names.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(names, ["lisbon", "ana_sousa", "york", "lgbtq", "mel"]);
        assert_eq!(s.names[1].1, "Ana Sousa");
        assert!(s.terms.contains(&"center".to_string()), "{:?}", s.terms);
        assert!(s.terms.contains(&"cold".to_string()), "{:?}", s.terms);
        assert!(!s.terms.contains(&"lisbon".to_string()), "{:?}", s.terms);
        assert_eq!(singular("stories"), "story");
        assert_eq!(singular("reports"), "report");
        assert_eq!(singular("glass"), "glass");
        assert_eq!(singular("tomatoes"), "tomato");
        assert_eq!(singular("watches"), "watch");
        assert_eq!(singular("shoes"), "shoe");
        assert!(mentions(
            "topic.quarterly_report",
            &word_set("the quarterly reports are late")
        ));
        assert!(!mentions(
            "topic.quarterly_report",
            &word_set("the quarterly figures")
        ));
    }

    #[test]
    fn rule_3_reads_a_message_without_its_speaker_label_and_takes_no_contraction_for_a_name() {
        let text = "Caroline: Yes, and I'm sure Melanie and I'll go. I've told Mel.";
        // Rule 2 (as old ledgers were indexed): the label's name is one of the words, so a
        // defined `entity.caroline` is mentioned; "I'm", "I'll" and "I've" are names.
        let two = scan(text, 2);
        assert!(two.words.contains("caroline"));
        let names: Vec<&str> = two.names.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(names, ["i'm", "melanie", "i'll", "mel"]);
        // Rule 3: neither.
        let three = scan(text, 3);
        assert!(!three.words.contains("caroline"), "{:?}", three.words);
        let names: Vec<&str> = three.names.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(names, ["melanie", "mel"]);
        let defined = ["entity.caroline".to_string(), "entity.melanie".to_string()];
        assert_eq!(mentioned(&defined, &two.words, 2), defined);
        assert_eq!(mentioned(&defined, &three.words, 3), ["entity.melanie"]);
        // What a label is: one to three capitalised words before ": ".
        assert_eq!(speaker_label("Dr Kim: hello"), Some("Dr Kim"));
        assert_eq!(speaker_label("note: hello"), None);
        assert_eq!(speaker_label("So we agreed on the plan: hello"), None);
        // An unlabelled message reads the same under both rules.
        assert_eq!(
            scan("We met Ana in Lisbon.", 3),
            scan("We met Ana in Lisbon.", 2)
        );
    }
}
